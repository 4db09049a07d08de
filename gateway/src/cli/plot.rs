//! `halo-gateway plot RECEIPTS [SETPOINTS] -o flight.svg`: a picture of one flight.
//!
//! Above, the target the vehicle was streamed (north, east and height above the local origin,
//! m) from the bridge's setpoint log (`vehicle.setpoint_log`), one thick segment per target from
//! its enqueue to whichever came first: the next target, the end of its certified interval, a
//! deny-hold, an operator hold, the pilot's override; beside it, thin, the vehicle's track (the
//! positions the bridge logged from the vehicle's own telemetry, 5 per second). Below, one row per component with its phases over time, from
//! the receipts. Vertical marks on both: dispatches (green), deny-holds (red), expiry holds
//! (orange: the bridge held at the end of a certified interval) and pilot overrides (purple). Both share the receipt clock (seconds since the first receipt): the
//! bridge and the gateway measure from the same origin.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::Value;

use super::{EXIT_ERROR, EXIT_OK};
use crate::error::Error;

/// One streamed target.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Target {
    pub from_ns: u64,
    pub to_ns: u64,
    pub north_m: f64,
    pub east_m: f64,
    pub height_m: f64,
}

/// One component's phases: `(since, phase)` in time order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub label: String,
    pub phases: Vec<(u64, String)>,
}

/// What a flight's files say, on the receipt clock.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Flight {
    pub start_ns: u64,
    pub end_ns: u64,
    pub rows: Vec<Row>,
    pub dispatches: Vec<u64>,
    pub deny_holds: Vec<u64>,
    pub overrides: Vec<u64>,
    /// Operator holds (they end the target streamed; not marked).
    pub holds: Vec<u64>,
    pub expiries: Vec<u64>,
    pub targets: Vec<Target>,
    /// Where the vehicle was: `(at, [north, east, height])` (a Crazyflie's x, y, z), in time
    /// order.
    pub track: Vec<(u64, [f64; 3])>,
    /// Deny-holds, expiry holds and overrides in the row of the component they stopped:
    /// `(at, row label, index into MARKS)`.
    pub row_marks: Vec<(u64, String, usize)>,
    /// The targets are a Crazyflie's (x forward, y left, z up, in its estimator's frame), kept
    /// in the `north`, `east`, `height` slots; otherwise PX4's local NED with height up.
    pub crazyflie: bool,
}

/// The phase names of the current and earlier logs, in the current spelling.
fn phase_name(v: &Value) -> Option<String> {
    v.as_str().map(str::to_ascii_lowercase)
}

impl Flight {
    /// The flight in `receipts` (bodies with their `at_ns`) and `setpoints` (the bridge's log
    /// lines).
    pub(crate) fn read(receipts: &[(u64, Value)], setpoints: &[Value]) -> Flight {
        let mut f = Flight {
            start_ns: receipts.first().map_or(0, |(t, _)| *t),
            end_ns: receipts.last().map_or(0, |(t, _)| *t),
            ..Flight::default()
        };
        let phase = |f: &mut Flight, at: u64, response: &str, component: &str, p: String| {
            let label = format!("{response}/{component}");
            let row = match f.rows.iter().position(|r| r.label == label) {
                Some(i) => f.rows.get_mut(i),
                None => {
                    f.rows.push(Row {
                        label,
                        phases: Vec::new(),
                    });
                    f.rows.last_mut()
                }
            };
            if let Some(row) = row
                && row.phases.last().is_none_or(|(_, last)| *last != p)
            {
                row.phases.push((at, p));
            }
        };
        for (at, b) in receipts {
            let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("");
            match s("kind") {
                "admitted" | "readmitted" => {
                    for c in halo_core::receipt::recorded_components(b) {
                        phase(
                            &mut f,
                            *at,
                            s("response"),
                            &c.id,
                            c.phase.to_ascii_lowercase(),
                        );
                    }
                }
                "phase" => {
                    if let Some(p) = b.get("phase").and_then(phase_name) {
                        phase(&mut f, *at, s("response"), s("component"), p);
                    }
                }
                "gate" if s("outcome") == "dispatched" => f.dispatches.push(*at),
                // The supervisor's deny-hold when it stopped a streaming target (the core's
                // `support_lost` also covers actions no longer streamed).
                "external"
                    if s("what") == "deny_hold"
                        && b.get("detail").and_then(|d| d.get("held"))
                            == Some(&Value::Bool(true)) =>
                {
                    f.deny_holds.push(*at);
                    f.mark_row(*at, b.get("detail"), 1);
                }
                "external" if s("what") == "target_expired" => {
                    f.expiries.push(*at);
                    f.mark_row(*at, b.get("detail"), 2);
                }
                "external" if s("what") == "operator_override" => {
                    f.overrides.push(*at);
                    f.mark_row(*at, b.get("detail").and_then(|d| d.get("stopped")), 3);
                }
                "external"
                    if s("what") == "operator_hold"
                        && b.get("detail").and_then(|d| d.get("held"))
                            == Some(&Value::Bool(true)) =>
                {
                    f.holds.push(*at);
                }
                _ => {}
            }
        }
        // The streamed targets, each until the next stop.
        let mut sp: Vec<(u64, u64, [f64; 3])> = setpoints
            .iter()
            .filter_map(|l| {
                let n = |k: &str| l.get(k).and_then(Value::as_f64);
                // PX4's bridge logs NED; the Crazyflie's bridge its own x, y, z (z up).
                let p = match (n("north_m"), n("east_m"), n("down_m")) {
                    (Some(north), Some(east), Some(down)) => [north, east, -down],
                    _ => [n("x_m")?, n("y_m")?, n("z_m")?],
                };
                Some((
                    l.get("t_ns")?.as_u64()?,
                    l.get("valid_until_ns")?.as_u64()?,
                    p,
                ))
            })
            .collect();
        sp.sort_by_key(|(t, _, _)| *t);
        f.track = setpoints
            .iter()
            .filter_map(|l| {
                let p = l.get("position")?;
                let n = |k: &str| p.get(k).and_then(Value::as_f64);
                let xyz = match (n("north_m"), n("east_m"), n("down_m")) {
                    (Some(north), Some(east), Some(down)) => [north, east, -down],
                    _ => [n("x_m")?, n("y_m")?, n("z_m")?],
                };
                Some((l.get("t_ns")?.as_u64()?, xyz))
            })
            .collect();
        f.track.sort_by_key(|(t, _)| *t);
        // A Crazyflie's bridge writes x, y, z (targets and track); PX4's north, east, down.
        let frame = |l: &Value, k: &str| l.get(k).or_else(|| l.get("position")?.get(k)).is_some();
        f.crazyflie = setpoints.iter().any(|l| frame(l, "x_m"))
            && !setpoints.iter().any(|l| frame(l, "north_m"));
        let stops: Vec<u64> = f
            .deny_holds
            .iter()
            .chain(&f.overrides)
            .chain(&f.holds)
            .chain(&f.expiries)
            .copied()
            .collect();
        for (i, (from, until, p)) in sp.iter().enumerate() {
            let next = sp.get(i + 1).map_or(u64::MAX, |(t, _, _)| *t);
            let stopped = stops
                .iter()
                .copied()
                .filter(|s| s > from)
                .min()
                .unwrap_or(u64::MAX);
            let to = next.min(*until).min(stopped);
            f.targets.push(Target {
                from_ns: *from,
                to_ns: to,
                north_m: p[0],
                east_m: p[1],
                height_m: p[2],
            });
        }
        if let Some(last) = f.targets.iter().map(|t| t.to_ns).max() {
            f.end_ns = f
                .end_ns
                .max(last.min(f.end_ns.saturating_add(60_000_000_000)));
        }
        f
    }

    /// A mark in the row of the component `named` names (`{"response", "component"}`), when it
    /// names one.
    fn mark_row(&mut self, at: u64, named: Option<&Value>, mark: usize) {
        let g = |k: &str| named.and_then(|v| v.get(k)).and_then(Value::as_str);
        if let (Some(r), Some(c)) = (g("response"), g("component")) {
            self.row_marks.push((at, format!("{r}/{c}"), mark));
        }
    }

    /// Seconds since the first receipt.
    #[allow(clippy::cast_precision_loss, reason = "seconds on an axis")]
    fn secs(&self, t: u64) -> f64 {
        t.saturating_sub(self.start_ns) as f64 / 1e9
    }

    /// One line for people: what the picture shows.
    pub(crate) fn summary(&self) -> String {
        let n =
            |v: usize, one: &str, many: &str| format!("{v} {}", if v == 1 { one } else { many });
        let track = if self.track.is_empty() {
            String::new()
        } else {
            format!(
                "; the vehicle's track from {}",
                n(self.track.len(), "position", "positions")
            )
        };
        format!(
            "{}, {}, {}, {}, {}, {} over {:.1} s{track}",
            n(self.rows.len(), "component", "components"),
            n(self.dispatches.len(), "dispatch", "dispatches"),
            n(self.deny_holds.len(), "deny-hold", "deny-holds"),
            n(self.expiries.len(), "expiry hold", "expiry holds"),
            n(self.overrides.len(), "pilot override", "pilot overrides"),
            n(self.targets.len(), "target streamed", "targets streamed"),
            self.secs(self.end_ns)
        )
    }
}

/// The colour of a phase.
fn phase_colour(p: &str) -> RGBColor {
    match p {
        "proposed" => RGBColor(200, 200, 200),
        "retained" => RGBColor(158, 202, 225),
        "pending" => RGBColor(253, 208, 162),
        "emitted" => RGBColor(102, 194, 164),
        "dispatched" => RGBColor(44, 160, 44),
        "observed_success" => RGBColor(0, 109, 44),
        "withheld" => RGBColor(255, 127, 14),
        "failed" => RGBColor(214, 39, 40),
        "invalidated" => RGBColor(148, 103, 189),
        _ => RGBColor(120, 120, 120),
    }
}

const MARKS: [(&str, RGBColor); 4] = [
    ("dispatch", RGBColor(44, 160, 44)),
    ("deny-hold", RGBColor(214, 39, 40)),
    ("expiry hold", RGBColor(255, 127, 14)),
    ("pilot override", RGBColor(148, 103, 189)),
];

/// A line of the upper panel: its name, colour and value.
type Series = (&'static str, RGBColor, fn(&Target) -> f64);

fn failed(e: impl std::fmt::Display) -> String {
    format!("the picture could not be drawn: {e}")
}

/// Draws `f` into an SVG at `out`.
fn draw(f: &Flight, out: &Path) -> Result<(), String> {
    const WIDTH: u32 = 1200;
    let rows = u32::try_from(f.rows.len().max(1)).unwrap_or(u32::MAX);
    let upper_panel = !f.targets.is_empty() || !f.track.is_empty();
    let top = if upper_panel { 320 } else { 0 };
    let bottom = 90 + 24 * rows;
    let root = SVGBackend::new(out, (WIDTH, top + bottom)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let (upper, lower) = root.split_vertically(top);
    // From a second before the first decision (the takeoff and the providers' first updates
    // before it are not drawn), with room on the right for the legends.
    let first = f
        .rows
        .iter()
        .filter_map(|r| r.phases.first().map(|(t, _)| *t))
        .chain(f.targets.iter().map(|t| t.from_ns))
        .min()
        .unwrap_or(f.start_ns);
    let x_start = (f.secs(first) - 1.0).max(0.0);
    let span = (f.secs(f.end_ns) - x_start).max(1.0);
    let x_end = x_start + span * 1.3;
    let marks: Vec<(f64, RGBColor)> = [&f.dispatches, &f.deny_holds, &f.expiries, &f.overrides]
        .iter()
        .zip(MARKS)
        .flat_map(|(ts, (_, c))| ts.iter().map(move |t| (f.secs(*t), c)))
        .collect();
    if upper_panel {
        draw_targets(&upper, f, x_start..x_end, &marks)?;
    }
    draw_phases(&lower, f, x_start..x_end, &marks)?;
    root.present().map_err(failed)
}

/// The upper chart: the targets streamed to the vehicle, with the marks.
fn draw_targets(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    f: &Flight,
    xs: std::ops::Range<f64>,
    marks: &[(f64, RGBColor)],
) -> Result<(), String> {
    let (x_start, x_end) = (xs.start, xs.end);
    // The track within the time axis only (the bridge logs until the gateway stops).
    let track: Vec<(f64, [f64; 3])> = f
        .track
        .iter()
        .map(|(t, p)| (f.secs(*t), *p))
        .filter(|(t, _)| (x_start..=x_end).contains(t))
        .collect();
    let values = || {
        f.targets
            .iter()
            .flat_map(|t| [t.north_m, t.east_m, t.height_m])
            .chain(track.iter().flat_map(|(_, p)| *p))
    };
    let lo = values().fold(0.0, f64::min) - 1.0;
    let hi = values().fold(0.0, f64::max) + 1.0;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "target streamed to the vehicle (thick) and where it flew (thin), from the setpoint log",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(160)
        .build_cartesian_2d(x_start..x_end, lo..hi)
        .map_err(failed)?;
    chart
        .configure_mesh()
        .x_desc("s since the first receipt")
        .y_desc(if f.crazyflie {
            "m (the Crazyflie's estimator frame)"
        } else {
            "m (local NED origin; height up)"
        })
        .draw()
        .map_err(failed)?;
    for (t, c) in marks {
        chart
            .draw_series(LineSeries::new(vec![(*t, lo), (*t, hi)], c.stroke_width(1)))
            .map_err(failed)?;
    }
    let names = if f.crazyflie {
        ["x (forward)", "y (left)", "z (up)"]
    } else {
        ["north", "east", "height"]
    };
    let series: [Series; 3] = [
        (names[0], RGBColor(31, 119, 180), |t| t.north_m),
        (names[1], RGBColor(23, 190, 207), |t| t.east_m),
        (names[2], RGBColor(0, 0, 0), |t| t.height_m),
    ];
    // The track's axes in the series' order (north, east, height; x, y, z), thin.
    for (k, &(name, colour, _)) in series.iter().enumerate() {
        let axis = track
            .iter()
            .map(|(t, p)| (*t, p.get(k).copied().unwrap_or(0.0)));
        let s = chart
            .draw_series(LineSeries::new(axis, colour.stroke_width(1)))
            .map_err(failed)?;
        // Without targets the thin lines carry the axes' names.
        if f.targets.is_empty() {
            s.label(name).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(1))
            });
        }
    }
    if !track.is_empty() {
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(failed)?
            .label("track flown")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(1)));
    }
    for (name, colour, value) in series {
        for (k, t) in f.targets.iter().enumerate() {
            let y = value(t);
            let s = chart
                .draw_series(LineSeries::new(
                    vec![(f.secs(t.from_ns), y), (f.secs(t.to_ns), y)],
                    colour.stroke_width(3),
                ))
                .map_err(failed)?;
            if k == 0 {
                s.label(name).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(3))
                });
            }
        }
    }
    for (name, colour) in MARKS {
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(failed)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x + 8, y - 6), (x + 8, y + 6)], colour));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(failed)?;
    Ok(())
}

/// The lower chart: each component's phases in its row, with the marks.
fn draw_phases(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    f: &Flight,
    xs: std::ops::Range<f64>,
    marks: &[(f64, RGBColor)],
) -> Result<(), String> {
    let (x_start, x_end) = (xs.start, xs.end);
    let n = i32::try_from(f.rows.len().max(1)).unwrap_or(i32::MAX);
    let mut chart = ChartBuilder::on(area)
        .caption("phases per component (receipts)", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(160)
        .build_cartesian_2d(x_start..x_end, (0..n).into_segmented())
        .map_err(failed)?;
    // Row k is drawn at segment n-1-k, so the first component is on top.
    let labels: Vec<String> = f.rows.iter().map(|r| r.label.clone()).collect();
    chart
        .configure_mesh()
        .y_labels(f.rows.len().max(1))
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(v) | SegmentValue::Exact(v) => usize::try_from(n - 1 - v)
                .ok()
                .and_then(|k| labels.get(k).cloned())
                .unwrap_or_default(),
            SegmentValue::Last => String::new(),
        })
        .x_desc("s since the first receipt")
        .draw()
        .map_err(failed)?;
    for (k, row) in f.rows.iter().enumerate() {
        let y = n - 1 - i32::try_from(k).unwrap_or(0);
        for (i, (since, p)) in row.phases.iter().enumerate() {
            let until = row.phases.get(i + 1).map_or(f.end_ns, |(t, _)| *t);
            let (a, b) = (f.secs(*since), f.secs(until).max(f.secs(*since) + 0.05));
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, SegmentValue::Exact(y)), (b, SegmentValue::Exact(y + 1))],
                    phase_colour(p).filled(),
                )))
                .map_err(failed)?;
        }
    }
    for (t, c) in marks {
        chart
            .draw_series(LineSeries::new(
                vec![(*t, SegmentValue::Exact(0)), (*t, SegmentValue::Last)],
                c.stroke_width(1),
            ))
            .map_err(failed)?;
    }
    // Each hold or override also in the row of the component it stopped.
    for (t, label, mark) in &f.row_marks {
        let (Some(k), Some((_, c))) = (
            f.rows.iter().position(|r| &r.label == label),
            MARKS.get(*mark),
        ) else {
            continue;
        };
        let y = n - 1 - i32::try_from(k).unwrap_or(0);
        let x = f.secs(*t);
        chart
            .draw_series(std::iter::once(TriangleMarker::new(
                (x, SegmentValue::CenterOf(y)),
                7,
                c.filled(),
            )))
            .map_err(failed)?;
    }
    let mut seen: Vec<&str> = Vec::new();
    for row in &f.rows {
        for (_, p) in &row.phases {
            if !seen.contains(&p.as_str()) {
                seen.push(p);
            }
        }
    }
    for p in seen {
        let c = phase_colour(p);
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, SegmentValue<i32>)>>())
            .map_err(failed)?
            .label(p.replace('_', " "))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(failed)?;
    Ok(())
}

/// The file's JSON lines (blank lines aside); a line that is not JSON is an error naming the
/// file and the line.
fn json_lines(path: &Path) -> Result<Vec<Value>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::file(format!("{}: {e}", path.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                Error::record(format!(
                    "{}:{}: not a JSON line: {e}",
                    path.display(),
                    i + 1
                ))
            })
        })
        .collect()
}

/// Draws the flight in `receipts` (and the bridge's `setpoints` log) into the SVG `out`;
/// returns what it drew, in words (the demo calls this at its end).
///
/// # Errors
/// An [`Error`] naming the file that could not be read (`File`, `Record`) or written
/// (`File`), or a log with nothing to draw (`Record`).
pub fn draw_flight(receipts: &Path, setpoints: Option<&Path>, out: &Path) -> Result<String, Error> {
    let log = crate::audit::read_log(&[PathBuf::from(receipts)])
        .map_err(|e| Error::record(e.to_string()))?;
    let bodies: Vec<(u64, Value)> = log
        .receipts
        .iter()
        .map(|r| (r.at_ns, r.body.value()))
        .collect();
    let sp = setpoints.map(json_lines).transpose()?.unwrap_or_default();
    let f = Flight::read(&bodies, &sp);
    if f.rows.is_empty() && f.targets.is_empty() {
        return Err(Error::record(format!(
            "{}: no component and no target to draw (is it a receipt log?)",
            receipts.display()
        )));
    }
    draw(&f, out).map_err(|e| Error::file(format!("{}: {e}", out.display())))?;
    Ok(f.summary())
}

/// `halo-gateway plot`: the exit code.
pub(crate) fn plot(receipts: &Path, setpoints: Option<&Path>, out: &Path) -> i32 {
    match draw_flight(receipts, setpoints, out) {
        Ok(summary) => {
            println!("{}: {summary}", out.display());
            EXIT_OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_flight_is_read_from_receipts_and_setpoints() {
        let receipts = vec![
            (
                S,
                json!({"kind": "admitted", "response": "r1", "components": [
                {"id": "a", "phase": "dispatched"}, {"id": "n", "phase": "EMITTED"}]}),
            ),
            (
                S,
                json!({"kind": "gate", "response": "r1", "component": "a", "outcome": "dispatched"}),
            ),
            (
                5 * S,
                // Receipt format 3: the ids, and each decision with the positions it names.
                json!({"kind": "admitted", "response": "r2", "components": {"ids": ["b"],
                    "decisions": [{"at": [0], "phase": "dispatched", "type": "route_action"}]}}),
            ),
            (
                5 * S,
                json!({"kind": "gate", "response": "r2", "component": "b", "outcome": "dispatched"}),
            ),
            (
                3 * S,
                json!({"kind": "external", "what": "target_expired", "detail": {"response": "r1", "component": "a"}}),
            ),
            (
                7 * S,
                json!({"kind": "support_lost", "response": "r2", "component": "b"}),
            ),
            (
                7 * S,
                json!({"kind": "external", "what": "deny_hold", "detail": {"held": true, "response": "r2", "component": "b"}}),
            ),
            (
                8 * S,
                json!({"kind": "support_lost", "response": "r1", "component": "a"}),
            ),
            (
                8 * S,
                json!({"kind": "external", "what": "deny_hold", "detail": {"held": false}}),
            ),
            (
                7 * S,
                json!({"kind": "phase", "response": "r2", "component": "b", "phase": "invalidated"}),
            ),
            (
                9 * S,
                json!({"kind": "gate", "response": "r3", "component": "c", "outcome": "denied"}),
            ),
        ];
        // a: enqueued at 1 s, certified to 3 s, held by the bridge then (its receipt).
        // b: enqueued at 5 s, certified to 15 s, stopped by the deny-hold at 7 s; the support
        // a loses at 8 s holds nothing (it no longer streams) and is not a deny-hold.
        // The track: three positions from the vehicle's telemetry, one out of order.
        let setpoints = vec![
            json!({"t_ns": S / 2, "position": {"north_m": 0.0, "east_m": 0.0, "down_m": -0.5}}),
            json!({"t_ns": S, "valid_until_ns": 3 * S, "north_m": 8.0, "east_m": 2.0, "down_m": -6.0}),
            json!({"t_ns": 6 * S, "position": {"north_m": 8.5, "east_m": 2.0, "down_m": -6.0}}),
            json!({"t_ns": 2 * S, "position": {"north_m": 4.0, "east_m": 1.0, "down_m": -5.5}}),
            json!({"t_ns": 5 * S, "valid_until_ns": 15 * S, "north_m": 9.0, "east_m": 2.0, "down_m": -6.0}),
        ];
        let f = Flight::read(&receipts, &setpoints);
        assert_eq!(
            f.rows.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
            ["r1/a", "r1/n", "r2/b"]
        );
        assert_eq!(
            f.rows.get(2).map(|r| r.phases.clone()),
            Some(vec![
                (5 * S, "dispatched".into()),
                (7 * S, "invalidated".into())
            ])
        );
        assert_eq!(
            f.rows.get(1).map(|r| r.phases.clone()),
            Some(vec![(S, "emitted".into())])
        );
        assert_eq!(f.dispatches, [S, 5 * S]);
        assert_eq!(f.deny_holds, [7 * S]);
        assert_eq!(f.expiries, [3 * S]);
        // Each in the row of the component it stopped (MARKS: 1 deny-hold, 2 expiry).
        assert_eq!(
            f.row_marks,
            [
                (3 * S, "r1/a".to_string(), 2),
                (7 * S, "r2/b".to_string(), 1)
            ]
        );
        assert_eq!(
            f.targets
                .iter()
                .map(|t| (t.from_ns, t.to_ns, t.height_m))
                .collect::<Vec<_>>(),
            [(S, 3 * S, 6.0), (5 * S, 7 * S, 6.0)]
        );
        assert_eq!(
            f.track,
            [
                (S / 2, [0.0, 0.0, 0.5]),
                (2 * S, [4.0, 1.0, 5.5]),
                (6 * S, [8.5, 2.0, 6.0])
            ]
        );
        assert!(!f.crazyflie);
        assert_eq!(
            f.summary(),
            "3 components, 2 dispatches, 1 deny-hold, 1 expiry hold, 0 pilot overrides, 2 targets streamed over 8.0 s; the vehicle's track from 3 positions"
        );
        // And it draws.
        let dir = std::env::temp_dir().join(format!("halo-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let out = dir.join("flight.svg");
        assert_eq!(draw(&f, &out), Ok(()));
        let svg = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(svg.starts_with("<svg"), "{}", svg.get(..80).unwrap_or(""));
        for label in [
            "r1/a",
            "r2/b",
            "deny-hold",
            "expiry hold",
            "invalidated",
            "height",
            "track flown",
        ] {
            assert!(svg.contains(label), "{label} not in the picture: {svg}");
        }
        // The two row marks are drawn (as triangles, the only polygons in the picture).
        assert_eq!(svg.matches("<polygon").count(), 2, "{svg}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A Crazyflie's log (x forward, y left, z up) is drawn in its own frame's words.
    #[test]
    fn a_crazyflie_log_is_drawn_in_its_own_frame() {
        const S: u64 = 1_000_000_000;
        let receipts = vec![
            (
                S,
                json!({"kind": "phase", "response": "cf", "component": "f1", "phase": "dispatched"}),
            ),
            (4 * S, json!({"kind": "external", "what": "tick"})),
        ];
        // The track's first position comes before the first target: the frame is still the
        // Crazyflie's.
        let setpoints = vec![
            json!({"t_ns": S / 2, "position": {"x_m": 0.0, "y_m": 0.0, "z_m": 0.1}}),
            json!({"t_ns": S, "valid_until_ns": 3 * S, "x_m": 0.8, "y_m": -0.0, "z_m": 0.5, "yaw_deg": 0.0}),
            json!({"t_ns": 2 * S, "position": {"x_m": 0.7, "y_m": 0.0, "z_m": 0.5}}),
        ];
        let f = Flight::read(&receipts, &setpoints);
        assert!(f.crazyflie);
        assert_eq!(
            f.track,
            [(S / 2, [0.0, 0.0, 0.1]), (2 * S, [0.7, 0.0, 0.5])]
        );
        assert_eq!(
            f.targets
                .iter()
                .map(|t| (t.north_m, t.east_m, t.height_m))
                .collect::<Vec<_>>(),
            [(0.8, -0.0, 0.5)]
        );
        let dir = std::env::temp_dir().join(format!("halo-plot-cf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let out = dir.join("flight.svg");
        assert_eq!(draw(&f, &out), Ok(()));
        let svg = std::fs::read_to_string(&out).unwrap_or_default();
        for label in ["x (forward)", "z (up)", "estimator frame", "cf/f1"] {
            assert!(svg.contains(label), "{label} not in the picture");
        }
        assert!(!svg.contains("local NED"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
