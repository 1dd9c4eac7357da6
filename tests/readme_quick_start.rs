//! The README's quick-start block is `examples/quick_start.rs`, so the code
//! a newcomer reads is the code `cargo run --example quick_start` runs (and
//! scripts/test's `quickstart` step runs in a guest). Host only.

const README: &str = include_str!("../README.md");
const EXAMPLE: &str = include_str!("../examples/quick_start.rs");

/// The text strictly between the line `begin` and the next line `end`
/// (whole lines, each compared without its newline).
fn between<'a>(text: &'a str, begin: &str, end: &str) -> Result<&'a str, String> {
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        let bare = line.strip_suffix('\n').unwrap_or(line);
        match start {
            None if bare == begin => start = Some(offset + line.len()),
            Some(s) if bare == end => return Ok(&text[s..offset]),
            _ => {}
        }
        offset += line.len();
    }
    Err(match start {
        None => format!("no line {begin:?}"),
        Some(_) => format!("no line {end:?} after {begin:?}"),
    })
}

/// The body of the one fenced block in `section`, with its info string.
fn fenced(section: &str) -> Result<(&str, &str), String> {
    let open = section
        .find("```")
        .ok_or("no fenced block between the markers")?;
    let after = &section[open + 3..];
    let (info, body) = after.split_once('\n').ok_or("an unclosed fence")?;
    let body = body
        .strip_suffix("```\n")
        .ok_or("the fence does not close right before the end marker")?;
    if !section[..open].trim().is_empty() {
        return Err("text between the begin marker and the fence".into());
    }
    Ok((info, body))
}

fn readme_block() -> (&'static str, &'static str) {
    let section = between(
        README,
        "<!-- quick-start: begin (examples/quick_start.rs) -->",
        "<!-- quick-start: end -->",
    )
    .unwrap_or_else(|e| panic!("README.md: {e}"));
    fenced(section).unwrap_or_else(|e| panic!("README.md quick start: {e}"))
}

#[test]
fn readme_quick_start_is_the_example() {
    let (info, block) = readme_block();
    assert_eq!(info, "rust,no_run", "README.md quick start: info string");
    let example = between(EXAMPLE, "// quick-start: begin", "// quick-start: end")
        .unwrap_or_else(|e| panic!("examples/quick_start.rs: {e}"));
    if block != example {
        let line = block
            .lines()
            .zip(example.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(block.lines().count().min(example.lines().count()));
        panic!(
            "README.md's quick-start block differs from examples/quick_start.rs \
             (between its markers) at block line {}:\n  README:  {:?}\n  example: {:?}\n\
             copy the example's lines into the README block",
            line + 1,
            block.lines().nth(line),
            example.lines().nth(line),
        );
    }
}

#[test]
fn markers_are_whole_lines_and_the_block_is_one_fence() {
    assert_eq!(between("a\nB\nx\nE\nB\ny\nE", "B", "E"), Ok("x\n"));
    assert!(
        between("a\nxB\nE\n", "B", "E").is_err(),
        "a marker is a whole line"
    );
    assert!(
        between("a\nB\nx\nE2\n", "B", "E").is_err(),
        "a marker is a whole line"
    );
    assert_eq!(fenced("```sh\nrun\n```\n"), Ok(("sh", "run\n")));
    assert!(fenced("words\n```sh\nrun\n```\n").is_err());
    assert!(fenced("```sh\nrun\n").is_err());
}
