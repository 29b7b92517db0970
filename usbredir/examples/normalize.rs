//! Prints the normalized register sequence of a register log (up to a NOTE line containing
//! the second argument, if given): `cargo run -p bramble-usbredir --example normalize LOG [NOTE]`.
fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: normalize LOG [NOTE]");
    let until = args.next();
    let text = std::fs::read_to_string(path).expect("read the log");
    let text: String = text
        .lines()
        .take_while(|l| {
            until
                .as_ref()
                .is_none_or(|u| !(l.contains("NOTE") && l.contains(u.as_str())))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    for step in bramble_usbredir::sequence::normalize(&text) {
        println!("{step}");
    }
}
