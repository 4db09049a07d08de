//! Pictures of the PX4 panels (SVG, with `plotters`): a latency distribution for the
//! deny-hold and latency panel, grouped bars for the profile, recovery-route and mechanism
//! panels. Each runner writes its picture next to its logs (`OUT/NAME.svg`); docs/conformance.md
//! shows the ten-cold-start ones.

use std::path::Path;

use plotters::prelude::*;

use crate::demo::DemoError;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 420;

/// Distinct, print-safe colours for the series.
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// The `i`th series' colour, repeating after four.
fn colour(i: usize) -> RGBColor {
    COLOURS.get(i % COLOURS.len()).copied().unwrap_or(BLACK)
}

fn failed(e: impl std::fmt::Display) -> DemoError {
    DemoError(format!("the plot could not be drawn: {e}"))
}

/// The empirical distribution of each series (values in ms, any order) on a logarithmic time
/// axis: one line per series, the fraction of samples at or below each value.
///
/// # Errors
/// [`DemoError`] when the file cannot be written.
pub fn distribution(
    path: &Path,
    title: &str,
    series: &[(&str, Vec<f64>)],
) -> Result<(), DemoError> {
    let all: Vec<f64> = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| *v > 0.0)
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(1e-3);
    let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 10.0);
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((lo / 1.5..hi * 1.5).log_scale(), 0.0..1.0)
        .map_err(failed)?;
    chart
        .configure_mesh()
        .x_desc("ms (log scale)")
        .y_desc("fraction of actions")
        .draw()
        .map_err(failed)?;
    for (i, (name, values)) in series.iter().enumerate() {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| *x > 0.0).collect();
        v.sort_by(f64::total_cmp);
        #[allow(clippy::cast_precision_loss, reason = "sample counts")]
        let n = v.len().max(1) as f64;
        #[allow(clippy::cast_precision_loss, reason = "sample counts")]
        let points: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .flat_map(|(k, x)| [(*x, k as f64 / n), (*x, (k + 1) as f64 / n)])
            .collect();
        let colour = colour(i);
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(failed)?
            .label(format!("{name} (n = {})", v.len()))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()
        .map_err(failed)?;
    root.present().map_err(failed)
}

/// Grouped bars: for each group (a variant, a profile), one bar per series, each the share
/// `n / of` of its denominator, labelled with the fraction's numbers in the legend's order.
///
/// # Errors
/// [`DemoError`] when the file cannot be written.
pub fn grouped_shares(
    path: &Path,
    title: &str,
    series: &[&str],
    groups: &[(String, Vec<(usize, usize)>)],
) -> Result<(), DemoError> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let k = series.len().max(1);
    #[allow(clippy::cast_precision_loss, reason = "a few groups")]
    let width = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..width, 0.0..1.45)
        .map_err(failed)?;
    let names: Vec<String> = groups.iter().map(|(g, _)| g.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let frac = x.fract();
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a group index"
            )]
            let i = x.floor() as usize;
            if (frac - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("share of its denominator")
        .draw()
        .map_err(failed)?;
    #[allow(clippy::cast_precision_loss, reason = "a few series")]
    let bar = 0.8 / k as f64;
    for (s, name) in series.iter().enumerate() {
        let colour = colour(s);
        #[allow(clippy::cast_precision_loss, reason = "a few groups and series")]
        let rects: Vec<Rectangle<(f64, f64)>> = groups
            .iter()
            .enumerate()
            .filter_map(|(g, (_, cells))| {
                let (n, of) = *cells.get(s)?;
                let share = if of == 0 { 0.0 } else { n as f64 / of as f64 };
                let x0 = g as f64 + 0.1 + bar * s as f64;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + bar * 0.9, share.max(0.004))],
                    colour.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(failed)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    // The numbers on the bars.
    for (g, (_, cells)) in groups.iter().enumerate() {
        for (s, (n, of)) in cells.iter().enumerate() {
            #[allow(clippy::cast_precision_loss, reason = "a few groups and series")]
            let x0 = g as f64 + 0.1 + bar * s as f64;
            #[allow(clippy::cast_precision_loss, reason = "counts")]
            let share = if *of == 0 {
                0.0
            } else {
                *n as f64 / *of as f64
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{n}/{of}"),
                    (x0, share + 0.04),
                    ("sans-serif", 11),
                )))
                .map_err(failed)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()
        .map_err(failed)?;
    root.present().map_err(failed)
}
