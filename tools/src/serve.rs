//! `bramble serve` (being written by its owner; see the workspace issue list).

/// Arguments of `bramble serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {}

/// Runs `bramble serve`.
pub fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("bramble serve is not implemented yet")
}
