//! Reading `modules.dep`, `modules.builtin` and `/proc/modules`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use super::name::normalise;

/// How a module file on disk is compressed, judged by its name.
///
/// ```
/// use ipvsctl::kmod::{module_name_of_path, Compression};
///
/// let (_, c) = module_name_of_path("ip_vs.ko.xz").unwrap();
/// assert_eq!((c, c.suffix()), (Compression::Xz, ".xz"));
/// ```
///
/// `#[non_exhaustive]`: kmod and the kernel have added compressions before
/// (zstd) and may add more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// A plain `.ko`.
    None,
    /// `.ko.xz`.
    Xz,
    /// `.ko.zst`.
    Zstd,
    /// `.ko.gz`.
    Gzip,
}

impl Compression {
    /// The file-name suffix after `.ko`, e.g. `".xz"`.
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Xz => ".xz",
            Compression::Zstd => ".zst",
            Compression::Gzip => ".gz",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "uncompressed",
            Compression::Xz => "xz-compressed",
            Compression::Zstd => "zstd-compressed",
            Compression::Gzip => "gzip-compressed",
        })
    }
}

/// The canonical module name and compression of a module file path such as
/// `kernel/net/netfilter/ipvs/ip_vs_rr.ko.xz`; `None` if it is not a `.ko`
/// file.
///
/// ```
/// use ipvsctl::kmod::{module_name_of_path, Compression};
///
/// assert_eq!(
///     module_name_of_path("kernel/net/netfilter/nf-conntrack.ko.zst"),
///     Some(("nf_conntrack".to_owned(), Compression::Zstd))
/// );
/// assert_eq!(module_name_of_path("README"), None);
/// ```
pub fn module_name_of_path(path: &str) -> Option<(String, Compression)> {
    let base = path.rsplit('/').next().unwrap_or(path);
    let (stem, compression) = [
        (".ko", Compression::None),
        (".ko.xz", Compression::Xz),
        (".ko.zst", Compression::Zstd),
        (".ko.gz", Compression::Gzip),
    ]
    .into_iter()
    .find_map(|(suffix, c)| base.strip_suffix(suffix).map(|s| (s, c)))?;
    if stem.is_empty() {
        return None;
    }
    Some((normalise(stem), compression))
}

/// One line of `modules.dep`.
///
/// ```
/// use ipvsctl::kmod::ModulesDep;
///
/// let dep = ModulesDep::parse("kernel/ip_vs_rr.ko: kernel/ip_vs.ko\n");
/// let e = dep.get("ip-vs-rr").unwrap();
/// assert_eq!((e.path.as_str(), e.line_number), ("kernel/ip_vs_rr.ko", 1));
/// assert_eq!(e.deps, ["kernel/ip_vs.ko"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DepEntry {
    /// Canonical module name.
    pub name: String,
    /// The module's path as written (relative to the modules directory,
    /// unless absolute).
    pub path: String,
    /// Compression judged from the file name.
    pub compression: Compression,
    /// The dependencies' paths as written, in file order.
    pub deps: Vec<String>,
    /// Line number, from 1.
    pub line_number: usize,
    /// The line as read.
    pub line: String,
}

/// One module file in load order, dependencies first.
///
/// ```
/// use ipvsctl::kmod::{Compression, ModulesDep};
///
/// let dep = ModulesDep::parse("kernel/ip_vs.ko.zst:\n");
/// let files = dep.load_order("ip_vs", "/lib/modules/6.12.9".as_ref()).unwrap();
/// assert_eq!(files[0].path, std::path::Path::new("/lib/modules/6.12.9/kernel/ip_vs.ko.zst"));
/// assert_eq!(files[0].compression, Compression::Zstd);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModuleFile {
    /// Canonical module name.
    pub name: String,
    /// The file, resolved against the modules directory.
    pub path: PathBuf,
    /// Compression judged from the file name.
    pub compression: Compression,
}

/// A parsed `modules.dep`, indexed by canonical module name.
///
/// ```
/// use ipvsctl::kmod::ModulesDep;
///
/// let dep = ModulesDep::parse(
///     "kernel/ip_vs_rr.ko: kernel/ip_vs.ko kernel/nf_conntrack.ko\n\
///      kernel/ip_vs.ko: kernel/nf_conntrack.ko\n\
///      kernel/nf_conntrack.ko:\n",
/// );
/// let order = dep.load_order("ip_vs_rr", "/lib/modules/6.1.0".as_ref()).unwrap();
/// let names: Vec<&str> = order.iter().map(|m| m.name.as_str()).collect();
/// assert_eq!(names, ["nf_conntrack", "ip_vs", "ip_vs_rr"]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ModulesDep {
    entries: HashMap<String, DepEntry>,
}

impl ModulesDep {
    /// Parses the text of a `modules.dep`. Lines that are not
    /// `path: deps...` with a `.ko` path are skipped.
    pub fn parse(text: &str) -> Self {
        let mut entries = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let Some((path, deps)) = line.split_once(':') else {
                continue;
            };
            let path = path.trim();
            let Some((name, compression)) = module_name_of_path(path) else {
                continue;
            };
            let entry = DepEntry {
                name: name.clone(),
                path: path.to_owned(),
                compression,
                deps: deps.split_whitespace().map(str::to_owned).collect(),
                line_number: i + 1,
                line: line.to_owned(),
            };
            // The first line for a name wins, as with depmod's own output.
            entries.entry(name).or_insert(entry);
        }
        Self { entries }
    }

    /// The entry for a module, by any spelling of its name.
    pub fn get(&self, name: &str) -> Option<&DepEntry> {
        self.entries.get(&normalise(name))
    }

    /// How many modules are listed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no module is listed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The files to load for `name`, dependencies first and the module
    /// last, with paths resolved against `modules_dir`; `None` if the module
    /// is not listed.
    ///
    /// Each dependency's own line orders its dependencies before it, so the
    /// order is right whatever order the line lists them in. A dependency
    /// with no line of its own is loaded in the reverse of the order it is
    /// listed in, which is how depmod writes them (most basic last).
    pub fn load_order(&self, name: &str, modules_dir: &Path) -> Option<Vec<ModuleFile>> {
        let entry = self.get(name)?;
        let mut out = Vec::new();
        let mut done = HashSet::new();
        self.visit(&entry.path, modules_dir, &mut done, &mut out, 0);
        Some(out)
    }

    fn visit(
        &self,
        path: &str,
        modules_dir: &Path,
        done: &mut HashSet<String>,
        out: &mut Vec<ModuleFile>,
        depth: usize,
    ) {
        let Some((name, compression)) = module_name_of_path(path) else {
            return;
        };
        // `done` is marked before recursing, so cycles terminate; the depth
        // bound only guards against pathological input.
        if depth > 64 || !done.insert(name.clone()) {
            return;
        }
        let own = self.entries.get(&name).filter(|e| e.path == path);
        if let Some(e) = own {
            for dep in e.deps.iter().rev() {
                self.visit(dep, modules_dir, done, out, depth + 1);
            }
        }
        out.push(ModuleFile {
            name,
            path: resolve(modules_dir, path),
            compression,
        });
    }
}

/// Resolves a path from `modules.dep` against the modules directory.
pub(crate) fn resolve(modules_dir: &Path, path: &str) -> PathBuf {
    if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        modules_dir.join(path)
    }
}

/// A line of a list file (`modules.builtin`, `/proc/modules`) that names a
/// module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListedLine {
    pub number: usize,
    pub text: String,
}

/// Finds `name` in `modules.builtin` text (one module path a line).
pub(crate) fn find_builtin(text: &str, name: &str) -> Option<ListedLine> {
    find_line(text, name, |line| {
        module_name_of_path(line.trim()).map(|(n, _)| n)
    })
}

/// Finds `name` in `/proc/modules` text (the name is the first field).
pub(crate) fn find_proc_module(text: &str, name: &str) -> Option<ListedLine> {
    find_line(text, name, |line| {
        line.split_whitespace().next().map(normalise)
    })
}

fn find_line(
    text: &str,
    name: &str,
    name_of: impl Fn(&str) -> Option<String>,
) -> Option<ListedLine> {
    let wanted = normalise(name);
    text.lines().enumerate().find_map(|(i, line)| {
        (name_of(line).as_deref() == Some(wanted.as_str())).then(|| ListedLine {
            number: i + 1,
            text: line.to_owned(),
        })
    })
}
