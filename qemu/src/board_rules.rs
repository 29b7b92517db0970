//! The board-rules judge: a QEMU TCG plugin of ours (qemu/plugin/boardrules.c, built here with
//! the system C compiler) that watches the guest's accesses to the peripheral window and
//! counts two rules the BCM2835 enforces and QEMU's models forgive (issue 27):
//!
//! - `spacing`: a write to an EMMC register other than DATA within two SD clocks of the
//!   previous one, in guest instructions at 700 MHz. The plugin decodes the SD clock from the
//!   CONTROL1 values in QEMU's own `sdhci_access` trace, which QEMU writes to the `-D` log
//!   while the store executes.
//! - `barrier`: a switch between two peripherals' register blocks without a DMB (or DSB)
//!   executed between them.
//!
//! Each violation is appended to the report file at once (so it survives a guest killed by
//! SIGKILL); a guest stopped with SIGTERM also gets the totals line. [`verdict`] reads the
//! report: the integration tests' `Guest` attaches the judge to every boot and fails the test
//! on any violation.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The plugin's C source, built by [`build_plugin`].
pub const PLUGIN_SOURCE: &str = include_str!("../plugin/boardrules.c");

/// The EMMC base clock QEMU 7.2's mailbox reports (its property channel answers 50 MHz for
/// the EMMC clock); the plugin decodes CONTROL1's divider against it.
pub const QEMU_EMMC_BASE_HZ: u32 = 50_000_000;

/// The judge attached to one QEMU run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoardRules {
    /// The built plugin (`libboardrules.so`).
    pub plugin: PathBuf,
    /// Where the plugin writes its report.
    pub report: PathBuf,
    /// QEMU's `-D` log, where the `sdhci_access` trace goes (the plugin reads it).
    pub trace_log: PathBuf,
}

impl BoardRules {
    /// The judge with its report and trace log in `dir`.
    pub fn in_dir(plugin: &Path, dir: &Path) -> Self {
        BoardRules {
            plugin: plugin.to_path_buf(),
            report: dir.join("boardrules.txt"),
            trace_log: dir.join("qemu-trace.log"),
        }
    }

    /// The QEMU arguments that load the plugin and turn the trace on.
    pub fn args(&self) -> Vec<OsString> {
        let plugin = format!(
            "file={},report={},log={},base={QEMU_EMMC_BASE_HZ}",
            escape(&self.plugin),
            escape(&self.report),
            escape(&self.trace_log)
        );
        vec![
            "-plugin".into(),
            plugin.into(),
            "-d".into(),
            "trace:sdhci_access".into(),
            "-D".into(),
            self.trace_log.clone().into_os_string(),
        ]
    }
}

/// QEMU's option syntax doubles commas inside a value.
fn escape(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}

/// What a report says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The violation lines, as the plugin wrote them (at most 50).
    pub violations: Vec<String>,
    /// The totals, when QEMU exited cleanly: (spacing, barrier, EMMC writes, switches).
    pub totals: Option<(u64, u64, u64, u64)>,
    /// The plugin started (its first line is there).
    pub started: bool,
}

impl Verdict {
    /// Whether no rule was broken.
    pub fn clean(&self) -> bool {
        self.violations.is_empty() && self.totals.is_none_or(|(s, b, _, _)| s == 0 && b == 0)
    }

    /// Violations per rule, counted from the totals when there are some, else from the
    /// listed lines: (spacing, barrier).
    pub fn counts(&self) -> (u64, u64) {
        if let Some((spacing, barrier, _, _)) = self.totals {
            return (spacing, barrier);
        }
        let count = |rule: &str| {
            self.violations
                .iter()
                .filter(|line| line.split_whitespace().nth(1) == Some(rule))
                .count() as u64
        };
        (count("spacing"), count("barrier"))
    }
}

/// Reads a report's text.
pub fn verdict(report: &str) -> Verdict {
    let mut verdict = Verdict::default();
    for line in report.lines() {
        if line.starts_with("violation ") {
            verdict.violations.push(line.to_string());
        } else if line == "boardrules: started" {
            verdict.started = true;
        } else if let Some(rest) = line.strip_prefix("boardrules: spacing=") {
            let mut numbers = rest
                .split_whitespace()
                .map(|field| field.rsplit('=').next().unwrap_or(field))
                .map(|value| value.parse::<u64>().ok());
            if let (Some(Some(s)), Some(Some(b)), Some(Some(w)), Some(Some(x))) = (
                numbers.next(),
                numbers.next(),
                numbers.next(),
                numbers.next(),
            ) {
                verdict.totals = Some((s, b, w, x));
            }
        }
    }
    verdict
}

/// Builds the plugin with the system C compiler (`$CC`, else `cc`) into `dir`, unless the
/// library there was built from the same source; returns the library's path.
pub fn build_plugin(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let library = dir.join("libboardrules.so");
    let source = dir.join("boardrules.c");
    let same = std::fs::read_to_string(&source).is_ok_and(|old| old == PLUGIN_SOURCE);
    if same && library.is_file() {
        return Ok(library);
    }
    // Built under a name of this process, then renamed: test binaries build it at once.
    let serial = format!("{}", std::process::id());
    let temporary_source = dir.join(format!("boardrules.{serial}.c"));
    let temporary_library = dir.join(format!("libboardrules.{serial}.so"));
    std::fs::write(&temporary_source, PLUGIN_SOURCE)
        .map_err(|e| format!("writing {}: {e}", temporary_source.display()))?;
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = std::process::Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-fvisibility=hidden")
        .arg("-o")
        .arg(&temporary_library)
        .arg(&temporary_source)
        .status()
        .map_err(|e| {
            format!(
                "running the C compiler {} for the board-rules plugin (Debian: gcc): {e}",
                Path::new(&compiler).display()
            )
        })?;
    if !status.success() {
        return Err(format!("building the board-rules plugin failed ({status})"));
    }
    std::fs::rename(&temporary_library, &library)
        .and_then(|()| std::fs::rename(&temporary_source, &source))
        .map_err(|e| format!("installing {}: {e}", library.display()))?;
    Ok(library)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_with_totals_and_violations() {
        let report = "boardrules: started\n\
            violation spacing pc=0x000428c8 addr=0x2030002c offset=0x2c after=1 needed=3500 clock=400000\n\
            violation barrier pc=0x0000d1a8 addr=0x2000b8b8 from=0x20003000 to=0x2000b000\n\
            boardrules: spacing=130 barrier=11356 emmc_writes=186 switches=21348 instructions=16227257\n";
        let verdict = verdict(report);
        assert!(verdict.started);
        assert!(!verdict.clean());
        assert_eq!(verdict.violations.len(), 2);
        assert_eq!(verdict.totals, Some((130, 11356, 186, 21348)));
        assert_eq!(verdict.counts(), (130, 11356));
    }

    #[test]
    fn a_clean_report_and_one_cut_short() {
        let clean = verdict(
            "boardrules: started\nboardrules: spacing=0 barrier=0 emmc_writes=186 switches=16001 instructions=1\n",
        );
        assert!(clean.clean());
        assert_eq!(clean.totals, Some((0, 0, 186, 16001)));
        // Killed before exit: the lines alone count.
        let killed =
            verdict("boardrules: started\nviolation barrier pc=0x1 addr=0x2 from=0x3 to=0x4\n");
        assert!(!killed.clean());
        assert_eq!(killed.counts(), (0, 1));
        assert!(!verdict("").started);
    }

    #[test]
    fn the_arguments_load_the_plugin_and_the_trace() {
        let rules = BoardRules::in_dir(Path::new("/p/libboardrules.so"), Path::new("/t/a,b"));
        let args: Vec<String> = rules
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-plugin",
                "file=/p/libboardrules.so,report=/t/a,,b/boardrules.txt,log=/t/a,,b/qemu-trace.log,base=50000000",
                "-d",
                "trace:sdhci_access",
                "-D",
                "/t/a,b/qemu-trace.log",
            ]
        );
    }
}
