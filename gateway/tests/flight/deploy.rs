//! On a companion computer: the set-up commands (`config example`, `catalog --embedded`,
//! `run --check`), the install script into a temporary root with its systemd unit verified, and
//! MAVLink 2 signing against a keyed simulated PX4.
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::service::*;
use crate::common::{self, BIN, Spawned, halo, repo_root};

fn report(suite: &str, c: &[(String, bool)], pinned: usize) {
    for (name, good) in c {
        println!("  {name:<72} {}", if *good { "ok" } else { "MISMATCH" });
    }
    let matched = c.iter().filter(|(_, g)| *g).count();
    println!("{suite}: {matched}/{} matched", c.len());
    assert_eq!((matched, c.len()), (pinned, pinned));
}

/// `config example`, `catalog --embedded` and `run --check`, as a person setting up a machine
/// types them.
#[test]
fn the_setup_commands_print_what_is_compiled_in_and_check_without_touching_state() {
    let _timing = common::shared();
    let dir = tmp("setup-commands");
    let root = repo_root();
    let mut c: Vec<(String, bool)> = Vec::new();
    for name in ["sim", "px4-sitl", "pixhawk-telem2", "crazyflie"] {
        let (code, out) = halo(&["config", "example", name]);
        let file = std::fs::read_to_string(root.join(format!("configs/{name}.toml"))).unwrap();
        c.push((
            format!("config example {name} is configs/{name}.toml"),
            code == 0 && out == file,
        ));
    }
    for (name, file) in [
        ("uav-px4", "uav-px4"),
        ("crazyflie", "crazyflie"),
        ("contract-uav", "contract-uav"),
    ] {
        let (code, out) = halo(&["catalog", "--embedded", name]);
        let text = std::fs::read_to_string(root.join(format!("catalogs/{file}.toml"))).unwrap();
        c.push((
            format!("catalog --embedded {name}"),
            code == 0 && out == text,
        ));
    }
    // Each printed example checks as `run` would take it, with its state directory moved here
    // (the check must not create it).
    let state = dir.join("never-created");
    let pki = crate::common::tls::make_pki(&dir);
    for (name, want) in [
        ("px4-sitl", Some("as system 1 component 191, unsigned")),
        ("pixhawk-telem2", Some("PX4 on serial:/dev/ttyAMA0:921600")),
        (
            "crazyflie",
            Some("a Crazyflie on radio://0/80/2M/E7E7E7E7E7"),
        ),
        ("sim", None),
    ] {
        let (_, text) = halo(&["config", "example", name]);
        let file = dir.join(format!("{name}.toml"));
        if text.contains("/etc/halo-gateway/tls/gateway.crt") {
            // Before the certificates are made (docs/deploy.md 6a) the check names the file;
            // with them in place it passes.
            std::fs::write(&file, &text).unwrap();
            let (code, out) = halo(&[
                "run",
                "--check",
                "--config",
                file.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
            ]);
            c.push((
                format!("run --check --config {name}.toml before its certificate is made names it"),
                code == 3 && out.contains("/etc/halo-gateway/tls/gateway.crt"),
            ));
        }
        let text = text
            .replace(
                "/etc/halo-gateway/tls/gateway.crt",
                pki.cert.to_str().unwrap(),
            )
            .replace(
                "/etc/halo-gateway/tls/gateway.key",
                pki.key.to_str().unwrap(),
            );
        std::fs::write(&file, text).unwrap();
        let (code, out) = halo(&[
            "run",
            "--check",
            "--config",
            file.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ]);
        let good = match want {
            Some(w) => code == 0 && out.contains(w) && out.contains("nothing written"),
            // The flight binary links no simulator: `sim` is refused as `run` refuses it.
            None => code == 3 && out.contains("links no simulator"),
        };
        if !good {
            println!("  {name}: exit {code}\n{out}");
        }
        c.push((format!("run --check --config {name}.toml"), good));
    }
    c.push((
        "run --check created no state directory".into(),
        !state.exists(),
    ));
    // The spellings of MAVSDK and MAVROS, and one that cannot be taken, on ports this test
    // owns (`run --check` opens nothing; the ports only have to be the test's own).
    let own = [0, 1].map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
    let [p, q] = own.each_ref().map(|s| s.local_addr().unwrap().port());
    let (code, out) = halo(&["run", "--check", "--vehicle", &format!("udpin://:{p}")]);
    c.push((
        "run --check --vehicle udpin://:PORT".into(),
        code == 0 && out.contains(&format!("PX4 on udpin:0.0.0.0:{p}")),
    ));
    let (code, out) = halo(&[
        "run",
        "--check",
        "--vehicle",
        &format!("udp://:{p}@127.0.0.1:{q}"),
    ]);
    c.push((
        "run --check --vehicle udp://:PORT@127.0.0.1:PORT2 says what to write".into(),
        code == 3 && out.contains(&format!("`udpout:127.0.0.1:{q}`")),
    ));
    let (code, out) = halo(&["run", "--check", "--vehicle", "udpin:0.0.0.0:port"]);
    c.push((
        "a bad port is named with the forms that are taken".into(),
        code == 3 && out.contains("`port` is not a port number") && out.contains("tcpin:HOST:PORT"),
    ));
    report("setup-commands", &c, SETUP_COMMANDS);
    let _ = std::fs::remove_dir_all(&dir);
}

const SETUP_COMMANDS: usize = 16;

/// The installed unit with its binary pointed into the temporary root (systemd-analyze checks
/// that the executable exists on this machine); verified, the output must be empty: systemd
/// reports an unknown or misspelled key as a warning with exit status 0.
fn verify_unit(unit_text: &str, dest: &Path, name: &str) -> (bool, String) {
    let dir = dest.join("verify");
    std::fs::create_dir_all(&dir).unwrap();
    let unit = dir.join(name);
    std::fs::write(
        &unit,
        unit_text.replace(
            "/usr/local/bin/halo-gateway",
            dest.join("usr/local/bin/halo-gateway").to_str().unwrap(),
        ),
    )
    .unwrap();
    let o = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (Debian's systemd; scripts/test.sh installs it)");
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success() && out.trim().is_empty(), out)
}

/// `deploy/install.sh` into a temporary root, as a package build would run it: every file in
/// its FHS place with its mode, the unit verified by systemd, the installed binary checking
/// and then running the installed configuration.
#[test]
fn the_install_script_installs_into_a_temporary_root_and_the_installed_gateway_runs() {
    let _timing = common::shared();
    let dir = tmp("deploy-install");
    let dest = dir.join("root");
    let root = repo_root();
    let mut c: Vec<(String, bool)> = Vec::new();
    let install = || {
        std::process::Command::new(root.join("deploy/install.sh"))
            .arg(BIN)
            .env("DESTDIR", &dest)
            .env("PREFIX", "/usr/local")
            .output()
            .unwrap()
    };
    let o = install();
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    println!("{said}{}", String::from_utf8_lossy(&o.stderr));
    c.push(("install.sh with DESTDIR exits 0".into(), o.status.success()));
    let mode = |p: &str| {
        std::fs::metadata(dest.join(p))
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    };
    for (path, want) in [
        ("usr/local/bin/halo-gateway", 0o755),
        ("etc/halo-gateway/config.toml", 0o640),
        ("etc/systemd/system/halo-gateway.service", 0o644),
        ("usr/local/share/halo-gateway/catalogs/uav-px4.toml", 0o644),
        ("usr/local/share/halo-gateway/configs/px4-sitl.toml", 0o644),
        ("usr/local/share/doc/halo-gateway/deploy.md", 0o644),
    ] {
        c.push((format!("/{path} mode {want:o}"), mode(path) == want));
    }
    let unit = std::fs::read_to_string(dest.join("etc/systemd/system/halo-gateway.service"))
        .unwrap_or_default();
    let (ok, out) = verify_unit(&unit, &dest, "halo-gateway.service");
    if !ok {
        println!("  systemd-analyze verify:\n{out}");
    }
    c.push(("systemd-analyze verify: clean".into(), ok));
    // The check is shown to catch a defect: one misspelled hardening key.
    let (ok, out) = verify_unit(
        &unit.replace("NoNewPrivileges=", "NoNewPrivilegs="),
        &dest,
        "halo-gateway.service",
    );
    c.push((
        "systemd-analyze verify catches a misspelled key (planted)".into(),
        !ok && out.contains("NoNewPrivilegs"),
    ));
    for (key, value) in [
        ("User", "halo-gateway"),
        ("StateDirectory", "halo-gateway"),
        ("SupplementaryGroups", "dialout"),
        ("ReadWritePaths", "/var/lib/halo-gateway"),
        ("ProtectSystem", "strict"),
        ("Restart", "on-failure"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
    ] {
        c.push((
            format!("unit sets {key}={value}"),
            unit.lines().any(|l| l == format!("{key}={value}")),
        ));
    }
    // The installed binary checks the installed configuration...
    let conf = dest.join("etc/halo-gateway/config.toml");
    let installed = dest.join("usr/local/bin/halo-gateway");
    let (code, out) = common::process::run(
        installed.to_str().unwrap(),
        &["run", "--check", "--config", conf.to_str().unwrap()],
    );
    c.push((
        "installed binary: run --check before the TLS certificate is made names it".into(),
        code == 3 && out.contains("/etc/halo-gateway/tls/gateway.crt"),
    ));
    // docs/deploy.md 6a: the certificate and key into the root's /etc/halo-gateway/tls (the
    // configuration names them under the real /etc: pointed into the temporary root here).
    let pki = crate::common::tls::make_pki(&dir);
    let tls = dest.join("etc/halo-gateway/tls");
    std::fs::create_dir_all(&tls).unwrap();
    std::fs::copy(&pki.cert, tls.join("gateway.crt")).unwrap();
    std::fs::copy(&pki.key, tls.join("gateway.key")).unwrap();
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(
        &conf,
        text.replace("/etc/halo-gateway/tls/", &format!("{}/", tls.display())),
    )
    .unwrap();
    let (code, out) = common::process::run(
        installed.to_str().unwrap(),
        &["run", "--check", "--config", conf.to_str().unwrap()],
    );
    c.push((
        "installed binary: run --check on the installed config".into(),
        code == 0 && out.contains("serial:/dev/ttyAMA0:921600"),
    ));
    // ...and runs it, with the vehicle, listener and state moved onto this machine (the
    // installed config names a Pi's UART and the network).
    let sim = Sim::start(&dir.join("vehicle.jsonl"));
    let state = dir.join("state");
    let vehicle = format!("udpout:{}", sim.addr);
    let p = Spawned::start_file(
        installed.to_str().unwrap(),
        &dir,
        &conf,
        &state,
        &[],
        &[
            "--vehicle",
            &vehicle,
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            state.to_str().unwrap(),
            "--log-format",
            "text",
        ],
    );
    // The installed config serves TLS: the helpers trust the test CA for the rest of this test.
    trust_ca(Some(&std::fs::read(&pki.ca).unwrap()));
    let t0 = Instant::now();
    let mut up = false;
    while !up && t0.elapsed() < Duration::from_secs(10) {
        up =
            get(&format!("{}/v1/status", p.url), Some(&p.creds[2])).1["vehicle"]["link_up"] == true;
        std::thread::sleep(Duration::from_millis(100));
    }
    c.push((
        "installed binary runs the installed config: link up".into(),
        up,
    ));
    // The installed config asks for `[realtime] priority = 50`: every thread of the process
    // (the runtime's, the bridge's, the receipt writer's) runs SCHED_FIFO 50 where the process
    // may raise its priority (this test runs as root), else none does (refused, with a warning).
    let threads = thread_policies(p.pid());
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let want = if root { (1, 50) } else { (0, 0) };
    let good = threads.len() >= 4 && threads.iter().all(|&t| t == want);
    if !good {
        println!("  thread (policy, priority): {threads:?}, expected {want:?} for each");
    }
    c.push((
        "installed config's realtime setting: every thread SCHED_FIFO 50 (as root)".into(),
        good,
    ));
    c.push(("over TLS (https://)".into(), p.url.starts_with("https://")));
    c.push(("and stops cleanly on SIGTERM".into(), p.stop() == 0));
    trust_ca(None);
    // A second install keeps the configuration the operator edited.
    std::fs::write(
        &conf,
        "# edited\n[vehicle]\nurl = \"serial:/dev/ttyUSB0:57600\"\n",
    )
    .unwrap();
    let o = install();
    c.push((
        "a second install keeps the edited config".into(),
        o.status.success()
            && std::fs::read_to_string(&conf)
                .unwrap()
                .starts_with("# edited")
            && String::from_utf8_lossy(&o.stdout).contains("keeping the existing"),
    ));
    report("deploy-install", &c, DEPLOY_INSTALL);
    let _ = std::fs::remove_dir_all(&dir);
}

const DEPLOY_INSTALL: usize = 23;

/// (scheduling policy, real-time priority) of every thread of process `pid`, from
/// `/proc/PID/task/TID/stat` (fields 41 and 40; 1 is SCHED_FIFO).
fn thread_policies(pid: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap();
        // After the command name's closing parenthesis come fields 3, 4, …
        let rest: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        out.push((rest[41 - 3].parse().unwrap(), rest[40 - 3].parse().unwrap()));
    }
    out
}

/// Writes a signing key file (64 hex digits) with `mode`.
fn key_file(path: &Path, key: [u8; 32], mode: u32) {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(path, hex + "\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// MAVLink 2 signing end to end: a simulated PX4 keyed as PX4's signing guide keys it refuses
/// every unsigned frame; the gateway with the same key arms it and takes off through it, with
/// nothing refused either way; without the key the same vehicle never arms; a key file others
/// can read is refused before anything starts.
#[test]
fn a_keyed_vehicle_flies_with_the_key_and_refuses_the_gateway_without_it() {
    let _timing = common::shared();
    let dir = tmp("signing");
    let key = [0xa7; 32];
    let mut c: Vec<(String, bool)> = Vec::new();
    let kf = dir.join("mavlink.key");
    key_file(&kf, key, 0o600);

    let sim = Sim::start_keyed(
        &dir.join("vehicle.jsonl"),
        None,
        sitl::sim::px4::SimConfig::default(),
        Some(key),
    );
    let extra = format!("signing_key_file = \"{}\"\n", kf.display());
    let g = Gateway::start_in(
        &dir,
        &dir.join("state"),
        &format!("udpout:{}", sim.addr),
        &extra,
    );
    take_off_at(&g.url, &g.operator, &sim);
    c.push((
        "with the key: armed and took off to 5 m".into(),
        sim.alt() > 4.8,
    ));
    let refused = sim
        .control
        .unsigned_refused
        .load(std::sync::atomic::Ordering::Relaxed);
    c.push((
        "the vehicle refused nothing the gateway sent".into(),
        refused == 0,
    ));
    let metrics = metrics_text(&g.url);
    c.push((
        "the gateway refused nothing the vehicle sent".into(),
        metrics.contains("halo_mavlink_unsigned_refused 0"),
    ));
    assert_eq!(g.stop(), 0);

    // The same kind of vehicle, a gateway without the key: heard, never obeyed.
    let sim = Sim::start_keyed(
        &dir.join("vehicle2.jsonl"),
        None,
        sitl::sim::px4::SimConfig::default(),
        Some(key),
    );
    let g = Gateway::start_in(
        &dir,
        &dir.join("state2"),
        &format!("udpout:{}", sim.addr),
        "",
    );
    let t0 = Instant::now();
    let mut armed = false;
    while t0.elapsed() < Duration::from_secs(4) && !armed {
        armed = post(
            &format!("{}/v1/operator/arm", g.url),
            Some(&g.operator),
            b"{}",
        )
        .0 == 200;
        std::thread::sleep(Duration::from_millis(400));
    }
    let refused = sim
        .control
        .unsigned_refused
        .load(std::sync::atomic::Ordering::Relaxed);
    println!("  without the key: armed {armed}, the vehicle refused {refused} frames");
    c.push((
        "without the key: never armed".into(),
        !armed && !sim.control.view().armed,
    ));
    c.push((
        "the vehicle refused the unsigned frames".into(),
        refused > 0,
    ));
    assert_eq!(g.stop(), 0);

    // A key file others can read: refused before anything starts, with the fix.
    key_file(&kf, key, 0o644);
    let cfg = dir.join("open-key.toml");
    std::fs::write(
        &cfg,
        format!(
            "[vehicle]\nurl = \"udpout:{}\"\n{extra}[listen]\nhttp = \"127.0.0.1:0\"\n[state]\ndir = \"{}\"\n",
            sim.addr,
            dir.join("state3").display()
        ),
    )
    .unwrap();
    let (code, out) = halo(&["run", "--config", cfg.to_str().unwrap()]);
    c.push((
        "a key others can read: run exits 7 with the chmod".into(),
        code == 7 && out.contains("chmod 600"),
    ));
    let (code, _) = halo(&["run", "--check", "--config", cfg.to_str().unwrap()]);
    c.push(("and run --check refuses it (exit 3)".into(), code == 3));
    key_file(&kf, key, 0o600);
    let (code, out) = halo(&["run", "--check", "--config", cfg.to_str().unwrap()]);
    c.push((
        "run --check with a private key says it signs".into(),
        code == 0 && out.contains("MAVLink signed"),
    ));
    report("service-signing", &c, SERVICE_SIGNING);
    let _ = std::fs::remove_dir_all(&dir);
}

const SERVICE_SIGNING: usize = 8;
