//! `bramble flash` (being written by its owner; see the workspace issue list).

/// Arguments of `bramble flash`.
#[derive(clap::Args, Debug)]
pub struct FlashArgs {}

/// Runs `bramble flash`.
pub fn run(_args: FlashArgs) -> anyhow::Result<()> {
    anyhow::bail!("bramble flash is not implemented yet")
}
