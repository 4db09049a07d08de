//! Shell-side helpers that touch files: loading catalogs and state files.

use std::path::Path;

use crate::core::catalog::{Catalog, CatalogError};

/// Reads and validates a catalog file.
///
/// # Errors
/// [`CatalogError`] when the file cannot be read or is invalid; the message names the file, the
/// line and the field.
pub fn load_catalog(path: &Path) -> Result<Catalog, CatalogError> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(src) => Catalog::parse(&src, &name),
        Err(e) => Err(CatalogError::io(&name, &format!("cannot read: {e}"))),
    }
}
