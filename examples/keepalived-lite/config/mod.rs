//! The configuration: the LVS half of keepalived's configuration language,
//! read the way keepalived 2.2.7 reads it, into [`model::Config`] with every
//! default and inherited setting resolved.
//!
//! The stages, each in its own module:
//! - `lexer`: physical lines to logical lines (comments, braces split off,
//!   words, `include`), as keepalived's `lib/parser.c` `read_line`;
//! - `include`: the file globbing behind `include`;
//! - `parse`, `vs`, `checker`: keywords to raw blocks, as the handlers of
//!   `global_parser.c`, `check_parser.c` and `check_*.c`;
//! - `resolve`: defaults and inheritance, as `validate_check_config` and
//!   `vs_end_handler`/`rs_end_handler`;
//! - `values`: numbers, timers, addresses, hex strings.
//!
//! Where keepalived would log an error and carry on (skip a server, ignore a
//! value, drop a checker), this parser refuses the file instead: the result
//! is either what keepalived would run, or an error naming the line.

pub mod model;

mod checker;
mod include;
mod lexer;
mod parse;
mod resolve;
mod values;
mod vs;

use std::path::Path;

pub use model::*;

/// Reads and parses the configuration file at `path` (and whatever it
/// `include`s, relative to the including file's directory).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = lexer::read_file(path).map_err(|reason| ConfigError {
        file: path.to_path_buf(),
        line: 0,
        keyword: None,
        reason,
    })?;
    parse_str(&text, path)
}

/// Parses `text` as if it had been read from `file`: errors and notices name
/// `file`, and `include` patterns are relative to its directory.
pub fn parse_str(text: &str, file: &Path) -> Result<Config, ConfigError> {
    let lines = lexer::lex(text, file)?;
    let raw = parse::parse(&lines)?;
    resolve::resolve(raw)
}
