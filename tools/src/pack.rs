//! `bramble pack` (being written by its owner; see the workspace issue list).

/// Arguments of `bramble pack`.
#[derive(clap::Args, Debug)]
pub struct PackArgs {}

/// Runs `bramble pack`.
pub fn run(_args: PackArgs) -> anyhow::Result<()> {
    anyhow::bail!("bramble pack is not implemented yet")
}
