#!/usr/bin/env python3
"""An example agent client for `halo-gateway run`: the page to copy from when wiring an LLM.

It submits the running example (a notice, a sensor report, a route action and a status that
waits for the action's dispatch), follows the event stream, and when the gateway withholds an
action with an obligation it answers with a fresh candidate planned against current state.

The agent side is `Agent` below: three HTTP calls (POST a response, POST a candidate, GET the
SSE stream) with the agent credential. Wire your model in `plan_route()` and `replan()`.

Each route action needs a certificate over its exact digest. The client asks the gateway's
reference certifier (`POST /v1/certify`, on with `[certifier] enabled = true`), which checks the
path from the vehicle and certifies the exact action or refuses with the reason. When it is off,
`--demo` plays a stand-in certifier with the provider credential (the digest from `POST
/v1/digest`, then `POST /v1/certificates`); without `--demo` the client stops before anything
flies. It needs no binary on PATH.

So that the example runs against the service on the embedded simulated PX4 (`scripts/run_sim.sh`),
`--demo` also plays the other parties with their own credentials: the operator (arm, takeoff,
land) and the state providers (traffic, map, corridor, authority ...). In a deployment those
are separate services. Every prerequisite (credentials, a certifier) is checked before anything
is armed.

    scripts/run_sim.sh &                     # prints the URL and writes the credentials
    python3 scripts/agent_client.py --demo   # reads them from the default state directory

Needs httpx (`pip install httpx`); with jsonschema installed it also checks every envelope
against the gateway's `GET /v1/schema` before sending it. Prints one JSON line per step to
stdout. Each dispatched action must reach the vehicle (its phase becomes OBSERVED_SUCCESS: PX4
echoed the exact target) before the next step: the map epoch moves only once e3 flies, so the
drift the example shows is drift during flight, not a race with PX4 entering OFFBOARD (about
1.1 s from HOLD on PX4 v1.16). Exits 0 when every dispatched action reached the vehicle and
the fresh candidate flew; 1 when one did not (it says which); 2 on a set-up error. With
`--demo` the vehicle is landed on the way out, whatever happened.
"""

import argparse
import hashlib
import json
import os
import sys
import threading
import time

import httpx

CATALOG = {"id": "uav-px4", "version": 6}


def default_state_dir():
    if os.environ.get("HALO_STATE_DIR"):
        return os.environ["HALO_STATE_DIR"]
    if os.environ.get("XDG_STATE_HOME"):
        return os.path.join(os.environ["XDG_STATE_HOME"], "halo-gateway")
    return os.path.expanduser("~/.local/state/halo-gateway")


def credential(state_dir, role):
    with open(os.path.join(state_dir, "credentials", f"{role}.token")) as f:
        return f.read().strip()


def say(**kv):
    print(json.dumps(kv, sort_keys=True), flush=True)


def route_action(cid, north, east, down, yaw, map_epoch, cert):
    """A route action as the catalog's `route_action` type expects it."""
    return {
        "id": cid,
        "type": "route_action",
        "payload": {"frame": "local_ned", "north_m": north, "east_m": east, "down_m": down,
                    "yaw_deg": yaw, "duration_s": 8.0},
        "support": {"map": {"epoch": map_epoch}, "traffic": {"epoch": 41},
                    "bounds": {"epoch": 3, "provenance": "corridor-12"}},
        "certificate": cert,
    }


class EventStream(threading.Thread):
    """Reads `GET /v1/events` (server-sent events) and keeps every event; resumes with
    Last-Event-ID after a dropped connection."""

    def __init__(self, url, token):
        super().__init__(daemon=True)
        self.url, self.token = url, token
        # Event ids are opaque (`BOOT.N`): kept as sent and echoed back on reconnect.
        self.events, self.last_id = [], None
        self.cond = threading.Condition()
        self.stopped = False

    def run(self):
        while not self.stopped:
            headers = {"Authorization": f"Bearer {self.token}"}
            if self.last_id:
                headers["Last-Event-ID"] = self.last_id
            try:
                with httpx.stream("GET", f"{self.url}/v1/events", headers=headers,
                                  timeout=httpx.Timeout(5.0, read=None)) as r:
                    r.raise_for_status()
                    ev = {}
                    for line in r.iter_lines():
                        if self.stopped:
                            return
                        if line.startswith("id:"):
                            ev["id"] = line[3:].strip()
                        elif line.startswith("event:"):
                            ev["event"] = line[6:].strip()
                        elif line.startswith("data:"):
                            ev["data"] = json.loads(line[5:].strip())
                        elif line == "" and "event" in ev:
                            with self.cond:
                                self.events.append(ev)
                                self.last_id = ev.get("id", self.last_id)
                                self.cond.notify_all()
                            ev = {}
            except (httpx.HTTPError, ValueError):
                time.sleep(0.5)

    def wait_for(self, pred, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for e in self.events:
                    if pred(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)


class Agent:
    """The agent's side of the link: only the agent credential."""

    def __init__(self, url, token):
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=30.0)
        # The envelope schema for the gateway's catalog: give it to the model's
        # structured-output mode, and check what it returns before sending.
        self.schema = self.http.get("/v1/schema").json()

    def valid(self, envelope):
        """True when `envelope` fits the schema (None without the jsonschema package)."""
        try:
            import jsonschema
        except ImportError:
            return None
        try:
            jsonschema.validate(envelope, self.schema)
            return True
        except jsonschema.ValidationError:
            return False

    def submit(self, envelope):
        r = self.http.post("/v1/responses", json=envelope)
        return r.status_code, r.json()

    def certifier_on(self):
        """Whether the gateway's reference certifier is on: it answers a component that is not
        a route action with INVALID_REQUEST, and CERTIFIER_DISABLED when it is off."""
        r = self.http.post("/v1/certify", json={"component": {
            "id": "probe", "type": "notice", "payload": {"text": "probe"}}})
        code = (r.json().get("error") or {}).get("code") if r.status_code != 200 else None
        if code not in ("CERTIFIER_DISABLED", "INVALID_REQUEST"):
            raise SetupError(f"unexpected answer from POST /v1/certify: {r.status_code} {r.text}")
        return code != "CERTIFIER_DISABLED"

    def certify(self, component):
        """The reference certifier checks the path to the component's target and certifies that
        exact component under the certificate id it names; False (and why) when it refuses."""
        r = self.http.post("/v1/certify", json={"component": component})
        if r.status_code != 200:
            err = r.json().get("error", {})
            say(step="certificate", component=component["id"], refused=err.get("code"),
                why=err.get("message"))
            return False
        v = r.json()
        say(step="certificate", component=component["id"], id=v["certificate"],
            covers=v["covers"][:16], by="reference certifier")
        return True

    def candidate(self, obligation, candidate):
        r = self.http.post(f"/v1/obligations/{obligation}/candidates", json=candidate)
        return r.status_code, r.json()


class DemoWorld:
    """The parties that are not the agent, for a self-contained run against the embedded
    simulator: operator, providers, certificate issuer."""

    def __init__(self, url, state_dir):
        self.url = url
        self.op = httpx.Client(base_url=url, timeout=30.0, headers={
            "Authorization": f"Bearer {credential(state_dir, 'operator')}"})
        self.prov = httpx.Client(base_url=url, timeout=30.0, headers={
            "Authorization": f"Bearer {credential(state_dir, 'provider')}"})
        # Epochs only move forward: a second run against the same gateway goes on from the
        # map epoch it holds.
        self.map_epoch = 7
        try:
            for src in self.op.get("/v1/status").json().get("sources", []):
                if src.get("source") == "map":
                    self.map_epoch = max(7, int(src["epoch"]))
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        self.took_off = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._publish_loop, daemon=True)
        # The background loop and the script both publish; the gateway refuses an update older
        # than the one it holds (OUT_OF_ORDER_UPDATE), so a publish stamps and sends under one
        # lock and two publishers never cross.
        self.publishing = threading.Lock()

    def publish(self):
        with self.publishing:
            self._publish_once()

    def _publish_once(self):
        now = int(time.time() * 1000)
        updates = {
            "traffic": ([{"north_m": 300.0, "east_m": -200.0, "down_m": -40.0}], 41, "utm-feed-a"),
            "map": (None, self.map_epoch, "map-service"),
            "bounds": ({"north_min": -50.0, "north_max": 100.0, "east_min": -50.0,
                        "east_max": 100.0, "down_min": -60.0, "down_max": 0.5}, 3, "corridor-12"),
            "authority": (True, 1, "operator"),
            "airspace": (True, 1, "laanc"),
            "preflight": (True, 1, "operator"),
            "wind": (4.0, 1, "weather"),
            "z_range": (5.1, 1, "rangefinder"),
        }
        for source, (value, epoch, prov) in updates.items():
            r = self.prov.post(f"/v1/state/{source}", json={
                "value": value, "epoch": epoch, "provenance": prov, "generated_at_unix_ms": now})
            r.raise_for_status()

    def _publish_loop(self):
        while not self.stop.is_set():
            try:
                self.publish()
            except httpx.HTTPError:
                pass
            self.stop.wait(0.2)

    def fly_to_altitude(self, metres):
        """Arm, take off, and wait until the vehicle hovers at `metres` above home. The height
        is PX4's own (`height_above_home_m`): its local frame's z is not height, the ground sits
        anywhere from -0.4 to +1.6 m there and moves at each landing."""
        deadline = time.monotonic() + 30
        while True:
            r = self.op.post("/v1/operator/arm")
            if r.status_code == 200:
                break
            if time.monotonic() > deadline:
                # The answer carries PX4's own reason when it gave one.
                raise SystemExit(f"could not arm: {r.text}")
            time.sleep(0.5)
        self.took_off = True
        r = self.op.post("/v1/operator/takeoff", json={"altitude_m": metres})
        if r.status_code != 200:
            raise SystemExit(f"takeoff refused: {r.text}")
        say(step="operator", did="arm and takeoff", altitude_m=metres)
        deadline = time.monotonic() + 40
        v = {}
        while time.monotonic() < deadline:
            v = self.op.get("/v1/status").json()["vehicle"]
            h = v.get("height_above_home_m")
            if v["landed_state"] == "in air" and h is not None and h > metres - 0.3:
                say(step="operator", did="hovering", height_above_home_m=round(h, 2))
                return
            time.sleep(0.2)
        raise SystemExit(f"the vehicle did not reach {metres} m above home: {json.dumps(v)}")

    def certify(self, component, cert_id):
        """A stand-in certifier (when the gateway's reference certifier is off): the exact
        digest from `POST /v1/digest`, then a certificate with the provider credential. It
        certifies without checking anything: a deployment brings a real one."""
        r = self.prov.post("/v1/digest", json={"component": component})
        r.raise_for_status()
        digest = r.json()["components"][0]["digest"]
        r = self.prov.post("/v1/certificates", json={
            "id": cert_id, "covers": digest, "valid_for_ms": 30000, "issuer": "stand-in"})
        r.raise_for_status()
        say(step="certificate", component=component["id"], id=cert_id, covers=digest[:16],
            by="stand-in")
        return True

    def land(self):
        r = self.op.post("/v1/operator/land")
        say(step="operator", did="land", status=r.status_code)


class SetupError(Exception):
    """Something the example needs is missing (exit 2)."""


def refusal(status, body):
    """An HTTP refusal as people read it: the status, the stable reason code and the message."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return f"HTTP {status}: {body}"
    return f"HTTP {status} {err.get('code', 'no reason code')}: {err.get('message', '')}"


def phase_of(report, component):
    """The component's phase and reason in a response report, (None, None) if absent."""
    for c in report.get("components", []):
        if c.get("id") == component:
            return c.get("phase"), c.get("reason")
    return None, None


def reached_vehicle(stream, component, response, timeout):
    """Waits until the vehicle took the dispatched action (phase OBSERVED_SUCCESS: PX4 echoed
    its exact target); says so either way."""
    ev = stream.wait_for(lambda e: e["event"] == "phase" and e["data"].get("response") == response
                         and e["data"].get("component") == component
                         and e["data"].get("phase") == "observed_success", timeout)
    say(step="vehicle", response=response, component=component, reached=ev is not None)
    if ev is None:
        print(f"agent_client: {response}/{component} was dispatched but never reached the "
              f"vehicle within {timeout} s", file=sys.stderr)
    return ev is not None


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Exit status: 0 every dispatched action reached the vehicle and the fresh "
               "candidate flew; 1 one did not, or a step failed; 2 a set-up error (no "
               "credentials, no certifier), found before anything is armed. Environment: "
               "HALO_STATE_DIR (credentials).")
    ap.add_argument("--url", default="http://127.0.0.1:8640",
                    help="the gateway's HTTP listener (default: %(default)s)")
    ap.add_argument("--state-dir", default=default_state_dir(),
                    help="the gateway's state directory, whose credentials/ holds the role "
                         "tokens (default: $HALO_STATE_DIR, else $XDG_STATE_HOME/halo-gateway, "
                         "else ~/.local/state/halo-gateway; now %(default)s)")
    ap.add_argument("--demo", action="store_true",
                    help="also play the operator (arm, takeoff, land), the state providers and, "
                         "when the gateway's reference certifier is off, a stand-in certificate "
                         "issuer, against the service on the simulated vehicle "
                         "(scripts/run_sim.sh); the vehicle is landed on the way out")
    ap.add_argument("--reach-timeout", type=float, default=10.0, metavar="S",
                    help="how long a dispatched action may take to reach the vehicle, s "
                         "(default: %(default)s; PX4 needs about 1.1 s to enter OFFBOARD)")
    args = ap.parse_args()
    url = args.url.rstrip("/")
    try:
        agent_token = credential(args.state_dir, "agent")
    except OSError as e:
        print(f"agent_client: no agent credential in {args.state_dir}: {e}", file=sys.stderr)
        return 2
    world = DemoWorld(url, args.state_dir) if args.demo else None
    try:
        return run(url, agent_token, world, args.reach_timeout)
    except SetupError as e:
        print(f"agent_client: {e}", file=sys.stderr)
        return 2
    finally:
        if world:
            world.stop.set()
            if world.took_off:
                world.land()


def run(url, agent_token, world, reach_timeout):
    stream = EventStream(url, agent_token)
    stream.start()
    agent = Agent(url, agent_token)
    # Every prerequisite before anything is armed: a certifier for the route actions.
    reference = agent.certifier_on()
    if not reference and not world:
        raise SetupError("the gateway's reference certifier is off ([certifier] enabled = true) "
                         "and no other certifier is wired in: nothing would fly")
    say(step="certifier", reference=reference)

    def certify(component, cert_id):
        return agent.certify(component) if reference else world.certify(component, cert_id)

    if world:
        world.fly_to_altitude(5.0)
        world.thread.start()
        time.sleep(0.6)

    # Ids of this run: a gateway keeps responses, certificates and events across runs, and a
    # second run must not be matched against the first one's.
    tag = f"{int(time.time() * 1000) % 100_000_000:08d}"
    r1_id, r2_id = f"resp-py-1-{tag}", f"resp-py-2-{tag}"
    epoch = world.map_epoch if world else 7

    # 1. The running example.
    e3 = route_action("e3", 12.0, 3.5, -10.0, 90.0, epoch, f"cert-py-1-{tag}")
    if not certify(e3, f"cert-py-1-{tag}"):
        return 1
    r1 = {"response_id": r1_id, "agent_id": "planner-1", "generation": 1,
          "catalog": CATALOG, "components": [
              {"id": "e1", "type": "notice", "payload": {"text": "Survey starts in 10 s"}},
              {"id": "e2", "type": "report",
               "payload": {"sensor": "z_range", "value": 5.1, "unit": "m"}},
              e3,
              {"id": "e4", "type": "status", "payload": {"text": "En route to WP3"},
               "requires": [{"id": "e3", "phase": "dispatched"}]}]}
    bad = dict(r1, extra_field=1)
    say(step="schema", valid=agent.valid(r1), rejects_extra=agent.valid(bad) is False)
    status, rep = agent.submit(r1)
    say(step="submit", response=r1_id, status=status,
        phases={c["id"]: c["phase"] for c in rep.get("components", [])})
    if status != 200:
        print(f"agent_client: {r1_id} refused: {refusal(status, rep)}", file=sys.stderr)
        return 1
    ok = all(c["phase"] in ("emitted", "dispatched", "observed_success")
             for c in rep["components"])
    # e3 must fly before the world moves on; a withheld e3 never left the gateway, so it is
    # reported with the gate's reason, not as a dispatch that went missing.
    phase, reason = phase_of(rep, "e3")
    if phase in ("dispatched", "observed_success"):
        ok = reached_vehicle(stream, "e3", r1_id, reach_timeout) and ok
    else:
        print(f"agent_client: {r1_id}/e3 was not dispatched: {phase} ({reason})",
              file=sys.stderr)
        return 1

    # 2. Conditions drift while the agent plans: the map moves to epoch 8.
    if world:
        world.map_epoch = epoch + 1
        world.publish()
    e5 = route_action("e5", 30.0, 20.0, -10.0, 45.0, epoch, f"cert-py-2-{tag}")
    if not certify(e5, f"cert-py-2-{tag}"):
        return 1
    r2 = {"response_id": r2_id, "agent_id": "planner-1", "generation": 2,
          "catalog": CATALOG, "components": [e5]}
    status, rep = agent.submit(r2)
    if status != 200:
        print(f"agent_client: {r2_id} refused: {refusal(status, rep)}", file=sys.stderr)
        return 1
    c = rep["components"][0]
    say(step="submit", response=r2_id, status=status, phase=c["phase"],
        reason=c["reason"], obligation=c["obligation"])

    # 3. The obligation arrives on the event stream with the sources to refresh and the scope
    #    a fresh candidate may replace; the agent replans against current state.
    ev = stream.wait_for(lambda e: e["event"] == "obligation_created"
                         and e["data"]["obligation"]["response"] == r2_id, 10)
    if ev is None:
        say(step="obligation", seen=False)
        return 1
    obl = ev["data"]["obligation"]
    say(step="obligation", id=obl["id"], reason=obl["reason"], refresh=obl["required"],
        scope=obl["scope"], event_id=ev["id"])
    fresh = route_action("e5", 30.0, 18.0, -10.0, 45.0, epoch + 1, f"cert-py-3-{tag}")
    if not certify(fresh, f"cert-py-3-{tag}"):
        return 1
    cand = {"obligation": obl["id"], "response_id": r2_id, "agent_id": "planner-1",
            "generation": 3, "catalog": CATALOG, "components": [fresh]}
    status, rep = agent.candidate(obl["id"], cand)
    phase = rep.get("current", {}).get("components", [{}])[0].get("phase") if status == 200 else None
    if status != 200:
        err = rep.get("error") or {}
        say(step="candidate", status=status, refused=err.get("code"), why=err.get("message"))
        print(f"agent_client: the fresh candidate was refused: {refusal(status, rep)}",
              file=sys.stderr)
        return 1
    say(step="candidate", status=status, phase=phase)
    ok = ok and phase in ("dispatched", "observed_success")

    # 4. The gate's outcome for the fresh instance, as the stream reports it.
    ev = stream.wait_for(lambda e: e["event"] == "gate" and e["data"].get("component") == "e5"
                         and e["data"].get("response") == r2_id
                         and e["data"].get("outcome") == "dispatched", 10)
    say(step="gate", dispatched=ev is not None)
    ok = ok and ev is not None
    if ev is not None:
        ok = reached_vehicle(stream, "e5", r2_id, reach_timeout) and ok
    if world:
        time.sleep(3)
    stream.stopped = True
    say(step="done", ok=ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
