//! `bramble image` (being written by its owner; see the workspace issue list).

/// Arguments of `bramble image`.
#[derive(clap::Args, Debug)]
pub struct ImageArgs {}

/// Runs `bramble image`.
pub fn run(_args: ImageArgs) -> anyhow::Result<()> {
    anyhow::bail!("bramble image is not implemented yet")
}
