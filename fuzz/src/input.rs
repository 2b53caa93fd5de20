//! Reading the fuzzer's bytes as a few small parameters followed by a payload.

/// A cursor over the fuzzer's bytes; past the end every read gives zero.
pub(crate) struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub(crate) fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    /// Up to `n` bytes (fewer at the end).
    pub(crate) fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = rest;
        head
    }

    /// A string of at most `max` bytes: its length in one byte, then that many bytes, read
    /// as UTF-8 with invalid bytes replaced (names and URIs are `str` everywhere).
    pub(crate) fn text(&mut self, max: usize) -> String {
        let len = usize::from(self.byte()) % (max + 1);
        String::from_utf8_lossy(self.take(len)).into_owned()
    }

    /// Chunk lengths for feeding the rest incrementally: a count, then one byte each.
    pub(crate) fn chunks(&mut self) -> Vec<usize> {
        let n = usize::from(self.byte() % 16);
        (0..n).map(|_| usize::from(self.byte())).collect()
    }

    pub(crate) fn rest(self) -> &'a [u8] {
        self.bytes
    }
}

/// `payload` cut into pieces of the given lengths (cycled; a length may be 0), the last
/// piece whatever remains.
pub(crate) fn pieces<'a>(payload: &'a [u8], lengths: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = payload;
    if lengths.is_empty() || lengths.iter().all(|&l| l == 0) {
        return vec![payload];
    }
    for &len in lengths.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (head, tail) = rest.split_at(len.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}
