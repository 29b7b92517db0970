//! The `walk` target's load script: a wrk Lua script that asks for every file of a site in
//! turn, so that a load run touches the whole site (and the server's cache sees its real
//! working set) rather than one file.

/// `path` as it goes into a request line: bytes other than letters, digits, `-._~/`
/// percent-encoded (the packer's paths are decoded UTF-8).
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &byte in path.as_bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A wrk Lua script that asks for `paths` one after the other, over and over, each of wrk's
/// (at most two) threads starting half-way through the list from the other, so that the
/// connections together walk the whole site rather than one part of it. The headers given to
/// wrk with `-H` go with every request.
pub fn walk_script(paths: &[String]) -> String {
    let mut script = String::from(
        "-- bramble-bench `walk` target: every file of the site, in turn (generated).\n\
         local paths = {\n",
    );
    for path in paths {
        // Percent-encoded, so nothing in it needs escaping in a Lua string.
        script.push_str(&format!("  \"{}\",\n", encode_path(path)));
    }
    script.push_str(
        "}\n\
         local threads = 0\n\
         function setup(thread)\n\
         \x20 thread:set(\"first\", threads)\n\
         \x20 threads = threads + 1\n\
         end\n\
         function init(args)\n\
         \x20 next_path = math.floor((first or 0) * #paths / 2)\n\
         end\n\
         function request()\n\
         \x20 next_path = next_path % #paths + 1\n\
         \x20 return wrk.format(nil, paths[next_path])\n\
         end\n",
    );
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_percent_encoded_for_the_request_line() {
        assert_eq!(
            encode_path("/walk/a-b_c.d~e/f.html"),
            "/walk/a-b_c.d~e/f.html"
        );
        assert_eq!(
            encode_path("/walk/my file\"\\é.html"),
            "/walk/my%20file%22%5C%C3%A9.html"
        );
    }

    #[test]
    fn the_walk_script_lists_every_path_once_and_splits_the_start_between_threads() {
        let paths: Vec<String> = ["/walk/index.html", "/walk/a b.css", "/walk/x/y.png"]
            .iter()
            .map(|path| path.to_string())
            .collect();
        let script = walk_script(&paths);
        for quoted in [
            "\"/walk/index.html\",",
            "\"/walk/a%20b.css\",",
            "\"/walk/x/y.png\",",
        ] {
            assert_eq!(script.matches(quoted).count(), 1, "{quoted} in\n{script}");
        }
        // Each request takes the next path of the list, wrapping round; each thread starts at
        // its own place (setup numbers them, init places them).
        assert!(
            script.contains("next_path = next_path % #paths + 1"),
            "{script}"
        );
        assert!(script.contains("return wrk.format(nil, paths[next_path])"));
        assert!(script.contains("thread:set(\"first\", threads)"));
        assert!(script.contains("math.floor((first or 0) * #paths / 2)"));
        assert_eq!(script.matches("function ").count(), 3, "{script}");
    }
}
