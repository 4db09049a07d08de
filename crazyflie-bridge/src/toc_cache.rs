//! A TOC cache in a directory, so a reconnect skips fetching the log and parameter tables.
//!
//! One file per table, named by the library's key (the table's CRC) in hex. A cache that cannot
//! be read or written is logged and ignored: the table is fetched again.

use std::path::PathBuf;

use crazyflie_lib::TocCache;

/// A directory of cached tables.
#[derive(Clone, Debug)]
pub struct DirTocCache {
    dir: PathBuf,
}

impl DirTocCache {
    /// Caches into `dir` (created on the first store).
    pub fn new(dir: PathBuf) -> DirTocCache {
        DirTocCache { dir }
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let mut name = String::with_capacity(key.len() * 2 + 5);
        for b in key {
            name.push_str(&format!("{b:02x}"));
        }
        name.push_str(".json");
        self.dir.join(name)
    }
}

impl TocCache for DirTocCache {
    fn get_toc(&self, key: &[u8]) -> Option<String> {
        std::fs::read_to_string(self.path(key)).ok()
    }

    fn store_toc(&self, key: &[u8], toc: &str) {
        let p = self.path(key);
        let r = std::fs::create_dir_all(&self.dir).and_then(|()| {
            let tmp = p.with_extension("tmp");
            std::fs::write(&tmp, toc)?;
            std::fs::rename(&tmp, &p)
        });
        if let Err(e) = r {
            tracing::warn!(path = %p.display(), "could not store the Crazyflie TOC cache: {e}");
        }
    }
}
