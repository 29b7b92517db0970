//! The three forms of a check's results: a table for people, JSON, and JUnit XML for CI test
//! reports (one test case per file, page and budget; warnings in the suite's system-out).

use std::fmt::Write;

use super::{CheckReport, Severity};

/// The table `bramble check` prints.
pub fn table(report: &CheckReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bramble check: {} served by {}: {} files, {} pages, {} same-site references, {:.2} s",
        report.subject,
        report.engine,
        report.files,
        report.pages,
        report.references,
        report.elapsed.as_secs_f64()
    );
    if !report.findings.is_empty() {
        let rows: Vec<[String; 4]> = report
            .findings
            .iter()
            .map(|finding| {
                let status = match finding.severity {
                    Severity::Error => "FAIL",
                    Severity::Warning => "warn",
                };
                let place = match (&finding.page, finding.line) {
                    (Some(page), Some(line)) => format!("{page}:{line}"),
                    (Some(page), None) => page.clone(),
                    _ => String::new(),
                };
                [
                    status.to_string(),
                    finding.kind.clone(),
                    finding.target.clone(),
                    place,
                ]
            })
            .collect();
        let header = ["result", "problem", "path", "where"].map(String::from);
        let mut widths = [0usize; 4];
        for row in std::iter::once(&header).chain(&rows) {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for (row, finding) in std::iter::once((&header, None))
            .chain(rows.iter().zip(report.findings.iter().map(Some)))
        {
            let mut line = String::from("  ");
            for (width, cell) in widths.iter().zip(row) {
                let _ = write!(line, "{cell:<width$}  ", width = *width);
            }
            if let Some(finding) = finding {
                line.push_str(&finding.detail);
            } else {
                line.push_str("detail");
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    let _ = writeln!(
        out,
        "{}: {} error{}, {} warning{}; {} bytes compared",
        if report.errors() == 0 {
            "passed"
        } else {
            "FAILED"
        },
        report.errors(),
        if report.errors() == 1 { "" } else { "s" },
        report.warnings(),
        if report.warnings() == 1 { "" } else { "s" },
        report.bytes_compared
    );
    out
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The results as one JSON object: the counts, `passed`, and every finding.
pub fn json(report: &CheckReport) -> String {
    let mut out = String::from("{\n");
    let _ = writeln!(out, "  \"subject\": {},", json_string(&report.subject));
    let _ = writeln!(out, "  \"engine\": {},", json_string(&report.engine));
    let _ = writeln!(out, "  \"passed\": {},", report.errors() == 0);
    let _ = writeln!(out, "  \"errors\": {},", report.errors());
    let _ = writeln!(out, "  \"warnings\": {},", report.warnings());
    let _ = writeln!(out, "  \"files\": {},", report.files);
    let _ = writeln!(out, "  \"pages\": {},", report.pages);
    let _ = writeln!(out, "  \"references\": {},", report.references);
    let _ = writeln!(out, "  \"bytes_compared\": {},", report.bytes_compared);
    let _ = writeln!(out, "  \"page_budget_bytes\": {},", report.budget_bytes);
    let _ = writeln!(out, "  \"seconds\": {:.3},", report.elapsed.as_secs_f64());
    out.push_str("  \"findings\": [");
    for (index, finding) in report.findings.iter().enumerate() {
        out.push_str(if index == 0 { "\n" } else { ",\n" });
        let _ = write!(
            out,
            "    {{\"severity\": {}, \"kind\": {}, \"path\": {}, \"page\": {}, \"line\": {}, \
             \"detail\": {}}}",
            json_string(match finding.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            }),
            json_string(&finding.kind),
            json_string(&finding.target),
            finding
                .page
                .as_deref()
                .map_or_else(|| "null".to_string(), json_string),
            finding
                .line
                .map_or_else(|| "null".to_string(), |line| line.to_string()),
            json_string(&finding.detail)
        );
    }
    out.push_str(if report.findings.is_empty() {
        "]\n}\n"
    } else {
        "\n  ]\n}\n"
    });
    out
}

/// `text` escaped for XML character data and attribute values; characters XML 1.0 cannot
/// hold are replaced.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The results as JUnit XML: a suite per kind of check, a test case per file, page and
/// budget, warnings in the `links` suite's system-out.
pub fn junit(report: &CheckReport) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let failures_total = report
        .cases
        .iter()
        .filter(|c| !c.failures.is_empty())
        .count();
    let _ = writeln!(
        out,
        "<testsuites name=\"bramble check {}\" tests=\"{}\" failures=\"{failures_total}\" \
         time=\"{:.3}\">",
        xml(&report.subject),
        report.cases.len(),
        report.elapsed.as_secs_f64()
    );
    let mut suites: Vec<&str> = Vec::new();
    for case in &report.cases {
        if !suites.contains(&case.suite) {
            suites.push(case.suite);
        }
    }
    let warnings: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .map(|f| format!("warning: {} {}: {}", f.kind, f.target, f.detail))
        .collect();
    if suites.is_empty() && !warnings.is_empty() {
        suites.push("site");
    }
    for (index, suite) in suites.iter().enumerate() {
        let cases: Vec<_> = report.cases.iter().filter(|c| c.suite == *suite).collect();
        let failed = cases.iter().filter(|c| !c.failures.is_empty()).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" \
             skipped=\"0\">",
            xml(suite),
            cases.len()
        );
        for case in cases {
            let _ = write!(
                out,
                "    <testcase classname=\"bramble.check.{}\" name=\"{}\"",
                xml(suite),
                xml(&case.name)
            );
            if case.failures.is_empty() {
                out.push_str("/>\n");
                continue;
            }
            out.push_str(">\n");
            let _ = writeln!(
                out,
                "      <failure message=\"{}\">{}</failure>",
                xml(&case.failures[0]),
                xml(&case.failures.join("\n"))
            );
            out.push_str("    </testcase>\n");
        }
        if index == 0 && !warnings.is_empty() {
            let _ = writeln!(
                out,
                "    <system-out>{}</system-out>",
                xml(&warnings.join("\n"))
            );
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}
