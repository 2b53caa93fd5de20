//! Fetchers the unit tests load descriptions with.

use std::cell::RefCell;
use std::collections::HashMap;

use url::Url;

use crate::Fetch;

/// Nothing can be fetched.
pub(crate) struct NoFiles;

impl Fetch for NoFiles {
    fn fetch(&self, _url: &Url) -> Result<Vec<u8>, String> {
        Err("no such file".to_string())
    }
}

/// Files by URL, recording each read.
pub(crate) struct Files {
    files: HashMap<String, String>,
    reads: RefCell<Vec<String>>,
}

impl Files {
    pub(crate) fn new(files: &[(&str, &str)]) -> Files {
        let files = files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Files {
            files,
            reads: RefCell::new(Vec::new()),
        }
    }

    pub(crate) fn reads(&self) -> Vec<String> {
        self.reads.borrow().clone()
    }
}

impl Fetch for Files {
    fn fetch(&self, url: &Url) -> Result<Vec<u8>, String> {
        self.reads.borrow_mut().push(url.to_string());
        self.files
            .get(url.as_str())
            .map(|s| s.clone().into_bytes())
            .ok_or_else(|| "no such file".to_string())
    }
}

/// Loads a description written in a test, with no external files.
pub(crate) fn doc(text: &str) -> crate::Document {
    crate::load(
        text.as_bytes(),
        "https://api.example.com/openapi.yaml",
        &NoFiles,
    )
    .unwrap()
}
