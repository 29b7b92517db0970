//! The board-rules judge (bramble_qemu::board_rules) for the QEMU boots the tool itself makes:
//! `bramble qemu` and `bramble check`. With `BRAMBLE_BOARD_RULES=on` in the environment
//! (tools/test.sh sets it, so that every QEMU boot of the test command is judged, the tool's
//! own tests and `bramble check site/default` included) the boot runs under the plugin, and a
//! violation makes the command fail with the plugin's lines. The integration tests' guests
//! (bramble_tests::Guest) are judged whether or not it is set.

use anyhow::Context;
use bramble_qemu::QemuConfig;
use bramble_qemu::board_rules::{self, BoardRules};

/// The environment variable that turns the judge on (`on`).
pub const VARIABLE: &str = "BRAMBLE_BOARD_RULES";

/// The judge of one boot: its report and trace log live in a folder of their own.
pub struct Judge {
    /// Holds the report until the judge is dropped.
    _dir: tempfile::TempDir,
    rules: BoardRules,
}

/// Puts `config` under the judge if [`VARIABLE`] says `on`.
pub fn attach(config: &mut QemuConfig) -> anyhow::Result<Option<Judge>> {
    if std::env::var(VARIABLE).as_deref() != Ok("on") {
        return Ok(None);
    }
    let plugin = board_rules::build_plugin(&crate::workspace_root().join("target/board-rules"))
        .map_err(anyhow::Error::msg)?;
    let dir = tempfile::Builder::new()
        .prefix("bramble-board-rules")
        .tempdir()
        .context("a folder for the board-rules report")?;
    let rules = BoardRules::in_dir(&plugin, dir.path());
    config.board_rules = Some(rules.clone());
    Ok(Some(Judge { _dir: dir, rules }))
}

impl Judge {
    /// After QEMU has exited: an error listing the violations, if there were any.
    pub fn check(&self) -> anyhow::Result<()> {
        let report = std::fs::read_to_string(&self.rules.report).unwrap_or_default();
        let verdict = board_rules::verdict(&report);
        if verdict.clean() {
            return Ok(());
        }
        let (spacing, barrier) = verdict.counts();
        anyhow::bail!(
            "the board-rules judge saw rules broken ({spacing} EMMC writes too close, {barrier} \
             peripheral switches without a barrier):\n{}",
            verdict.violations.join("\n")
        )
    }
}
