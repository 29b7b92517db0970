//! PNG charts of a [`Report`]: throughput and latency (and, for hosted runs, server CPU per
//! request) against concurrency, one panel per target, every system on each panel. Text is drawn with an embedded DejaVu Sans.

use super::report::{LoadReport, Report, TARGETS};
use anyhow::{Context, anyhow};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

pub(crate) const FONT: &str = "sans-serif";
pub(crate) const COLORS: [RGBColor; 6] = [
    RGBColor(27, 127, 55),
    RGBColor(40, 90, 200),
    RGBColor(200, 90, 20),
    RGBColor(120, 60, 160),
    RGBColor(190, 30, 90),
    RGBColor(110, 110, 110),
];

pub(crate) fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    ok.then_some(()).context("the embedded font did not load")
}

/// One line on a panel: label, colour, points (concurrency, value), dashed-looking (thin).
struct Line {
    label: String,
    color: RGBColor,
    thin: bool,
    points: Vec<(f64, f64)>,
}

/// Writes `throughput.png` and `latency.png` into `dir`, and for hosted runs `cpu.png`.
pub fn write_plots(report: &Report, dir: &Path) -> anyhow::Result<()> {
    register_font()?;
    let throughput = lines_per_target(report, |load| {
        Some(load.figures.as_ref()?.requests_per_second)
    });
    draw(
        &dir.join("throughput.png"),
        &format!(
            "Requests per second (good responses), {} {} {}",
            report.machine, report.date, report.commit
        ),
        "requests/s",
        &throughput,
    )?;
    let latency: Vec<Vec<Line>> = TARGETS
        .iter()
        .map(|(target, _)| {
            let mut lines = Vec::new();
            for (system, &color) in report.systems.iter().zip(COLORS.iter().cycle()) {
                for (name, thin) in [("p50", false), ("p99", true)] {
                    lines.push(Line {
                        label: format!("{} {name}", system.name),
                        color,
                        thin,
                        points: report
                            .levels
                            .iter()
                            .filter_map(|&level| {
                                let l = &system.load(target, level)?.figures.as_ref()?.latency_ms;
                                let value = if thin { l.p99 } else { l.p50 };
                                Some((level as f64, value.max(0.01)))
                            })
                            .collect(),
                    });
                }
            }
            lines
        })
        .collect();
    draw(
        &dir.join("latency.png"),
        &format!(
            "Latency p50 (thick) and p99 (thin), {} {} {}",
            report.machine, report.date, report.commit
        ),
        "milliseconds",
        &latency,
    )?;
    if report.hosted {
        write_cpu_plot(report, dir)?;
    }
    Ok(())
}

/// Hosted runs: `cpu.png`, each server's CPU time per good response against concurrency.
fn write_cpu_plot(report: &Report, dir: &Path) -> anyhow::Result<()> {
    let cpu = lines_per_target(report, |load| {
        Some(
            load.server_cpu
                .as_ref()?
                .microseconds_per_request?
                .max(0.01),
        )
    });
    draw(
        &dir.join("cpu.png"),
        &format!(
            "Server CPU per request (all its processes), {} {} {}",
            report.machine, report.date, report.commit
        ),
        "CPU microseconds / request",
        &cpu,
    )
}

/// One panel per target, one line per system: `value` of each level's load report.
fn lines_per_target(report: &Report, value: impl Fn(&LoadReport) -> Option<f64>) -> Vec<Vec<Line>> {
    TARGETS
        .iter()
        .map(|(target, _)| {
            report
                .systems
                .iter()
                .zip(COLORS.iter().cycle())
                .map(|(system, &color)| Line {
                    label: system.name.clone(),
                    color,
                    thin: false,
                    points: report
                        .levels
                        .iter()
                        .filter_map(|&level| {
                            Some((level as f64, value(system.load(target, level)?)?))
                        })
                        .collect(),
                })
                .collect()
        })
        .collect()
}

/// A y range covering every point with some room, on a log scale.
fn y_range(panels: &[Vec<Line>]) -> (f64, f64) {
    let values = panels
        .iter()
        .flatten()
        .flat_map(|line| line.points.iter().map(|&(_, y)| y))
        .filter(|y| *y > 0.0);
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(lo, hi), y| (lo.min(y), hi.max(y)));
    if low > high {
        (1.0, 10.0)
    } else {
        // Room above the data for the legend.
        (low / 2.0, high * 8.0)
    }
}

fn draw(path: &Path, title: &str, y_label: &str, panels: &[Vec<Line>]) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (1500, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let root = root.titled(title, (FONT, 22)).map_err(|e| anyhow!("{e}"))?;
    let (low, high) = y_range(panels);
    // Only the targets that were measured get a panel (all of them when none was), and the
    // x axis reaches past the largest level.
    let mut shown: Vec<(&Vec<Line>, (&str, &str))> = panels
        .iter()
        .zip(TARGETS)
        .filter(|(lines, _)| lines.iter().any(|line| !line.points.is_empty()))
        .collect();
    if shown.is_empty() {
        shown = panels.iter().zip(TARGETS).collect();
    }
    let largest = panels
        .iter()
        .flatten()
        .flat_map(|line| line.points.iter().map(|point| point.0))
        .fold(1000.0f64, f64::max);
    for (area, (lines, (target, what))) in root.split_evenly((1, shown.len())).iter().zip(shown) {
        panel(
            area,
            &format!("{target}: {what}"),
            y_label,
            ((low, high), largest * 2.0),
            lines,
        )?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    y_label: &str,
    ((low, high), x_high): ((f64, f64), f64),
    lines: &[Line],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let x = (5.0f64..x_high).log_scale();
    let y = (low..high).log_scale();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)
        .map_err(|e| anyhow!("{e}"))?;
    mesh(&mut chart, y_label)?;
    for line in lines.iter().filter(|line| !line.points.is_empty()) {
        let color = line.color;
        let width = if line.thin { 1 } else { 3 };
        chart
            .draw_series(LineSeries::new(
                line.points.clone(),
                color.stroke_width(width),
            ))
            .map_err(|e| anyhow!("{e}"))?
            .label(line.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
        chart
            .draw_series(
                line.points.iter().map(|&point| {
                    Circle::new(point, if line.thin { 3 } else { 4 }, color.filled())
                }),
            )
            .map_err(|e| anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

fn mesh<DB, X, Y>(
    chart: &mut ChartContext<DB, Cartesian2d<X, Y>>,
    y_label: &str,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("concurrent clients")
        .y_desc(y_label)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| {
            if *v >= 10.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        })
        .light_line_style(RGBColor(235, 235, 235))
        .y_labels(6)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Latency, LoadFigures};
    use crate::report::{LoadReport, SystemReport};

    #[test]
    fn writes_two_nonempty_pngs() {
        let loads = |rps: f64| {
            [10, 100, 1000]
                .iter()
                .flat_map(|&c| {
                    TARGETS.iter().map(move |(target, _)| LoadReport {
                        target: target.to_string(),
                        concurrency: c,
                        figures: Some(LoadFigures {
                            requests_per_second: rps * c as f64 / 10.0,
                            latency_ms: Latency {
                                p50: 5.0,
                                p90: 8.0,
                                p99: 20.0,
                                max: 30.0,
                            },
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                })
                .collect()
        };
        let report = Report {
            levels: vec![10, 100, 1000],
            systems: vec![
                SystemReport {
                    name: "bramble".into(),
                    loads: loads(1000.0),
                    ..Default::default()
                },
                SystemReport {
                    name: "linux".into(),
                    loads: loads(100.0),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        write_plots(&report, dir.path()).unwrap();
        for name in ["throughput.png", "latency.png"] {
            let bytes = std::fs::read(dir.path().join(name)).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}");
            assert!(bytes.len() > 10_000, "{name}: {} bytes", bytes.len());
        }
        assert!(
            !dir.path().join("cpu.png").exists(),
            "cpu.png only for hosted runs"
        );
        let hosted = Report {
            hosted: true,
            ..report
        };
        write_plots(&hosted, dir.path()).unwrap();
        let bytes = std::fs::read(dir.path().join("cpu.png")).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
}
