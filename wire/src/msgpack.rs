//! A strict reader of MessagePack in the form `rmp-serde` writes: the fast paths of hot
//! decoders (`fast` here, the demo session app's relay packets in `zlink`) read with it and
//! hand anything it does not accept to `rmp-serde`, which stays the authority.
//!
//! Every read is bounds-checked and returns `None` on anything unexpected (another marker, a
//! short slice, invalid UTF-8, a value out of range): no panic on untrusted bytes, lengths come
//! from at most 4 bytes and are checked against the slice before use.

/// A cursor over MessagePack bytes.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    #[must_use]
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        Self(bytes)
    }

    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    #[inline]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    #[inline]
    fn be(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
        )
    }

    #[inline]
    fn len(&mut self, n: usize) -> Option<usize> {
        usize::try_from(self.be(n)?).ok()
    }

    /// An unsigned integer in any of MessagePack's unsigned forms (not a signed one).
    // Always inlined: a 24's body reads seven (as calls: about 20 instructions each).
    #[inline(always)]
    pub fn uint(&mut self) -> Option<u64> {
        match self.byte()? {
            b @ 0x00..=0x7f => Some(u64::from(b)),
            0xcc => self.be(1),
            0xcd => self.be(2),
            0xce => self.be(4),
            0xcf => self.be(8),
            _ => None,
        }
    }

    /// [`Reader::uint`] that fits a `u32`.
    #[inline]
    pub fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.uint()?).ok()
    }

    /// An array header: its element count.
    #[inline]
    pub fn array(&mut self) -> Option<usize> {
        match self.byte()? {
            b @ 0x90..=0x9f => Some(usize::from(b & 0x0f)),
            0xdc => self.len(2),
            0xdd => self.len(4),
            _ => None,
        }
    }

    /// A map header: its entry count.
    #[inline]
    pub fn map(&mut self) -> Option<usize> {
        match self.byte()? {
            b @ 0x80..=0x8f => Some(usize::from(b & 0x0f)),
            0xde => self.len(2),
            0xdf => self.len(4),
            _ => None,
        }
    }

    /// A string (UTF-8 checked), borrowed.
    #[inline]
    pub fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.text_bytes()?).ok()
    }

    /// A string's bytes, not checked for UTF-8: for comparing with known names (a map's field
    /// names), where any other bytes are refused anyway.
    #[inline]
    pub fn text_bytes(&mut self) -> Option<&'a [u8]> {
        let len = match self.byte()? {
            b @ 0xa0..=0xbf => usize::from(b & 0x1f),
            0xd9 => self.len(1)?,
            0xda => self.len(2)?,
            0xdb => self.len(4)?,
            _ => return None,
        };
        self.take(len)
    }

    /// A binary value, borrowed.
    #[inline]
    pub fn bin(&mut self) -> Option<&'a [u8]> {
        let len = match self.byte()? {
            0xc4 => self.len(1)?,
            0xc5 => self.len(2)?,
            0xc6 => self.len(4)?,
            _ => return None,
        };
        self.take(len)
    }

    /// Consumes `raw` if the next bytes are exactly it (a known item written in advance, such
    /// as a map's field name with its marker); else reads nothing and returns `None`.
    #[inline]
    pub fn expect(&mut self, raw: &[u8]) -> Option<()> {
        self.0 = self.0.strip_prefix(raw)?;
        Some(())
    }

    /// Consumes a nil if one is next.
    #[inline]
    pub fn nil(&mut self) -> bool {
        match self.0.split_first() {
            Some((0xc0, rest)) => {
                self.0 = rest;
                true
            }
            _ => false,
        }
    }

    /// `Some` when every byte was read.
    #[must_use]
    #[inline]
    pub fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_and_refuses_short_input() {
        let mut buf = Vec::new();
        rmp::encode::write_uint(&mut buf, 300).unwrap();
        rmp::encode::write_map_len(&mut buf, 20).unwrap();
        rmp::encode::write_str(&mut buf, &"x".repeat(40)).unwrap();
        rmp::encode::write_bin(&mut buf, &[1, 2, 3]).unwrap();
        rmp::encode::write_nil(&mut buf).unwrap();
        let mut r = Reader::new(&buf);
        assert_eq!(r.uint(), Some(300));
        assert_eq!(r.map(), Some(20));
        assert_eq!(r.text().map(str::len), Some(40));
        assert_eq!(r.bin(), Some(&[1u8, 2, 3][..]));
        assert!(r.nil());
        assert_eq!(r.end(), Some(()));
        // Every prefix of the string item fails cleanly.
        let mut s = Vec::new();
        rmp::encode::write_str(&mut s, &"x".repeat(40)).unwrap();
        for n in 0..s.len() {
            assert_eq!(Reader::new(&s[..n]).text(), None);
        }
        // `expect` consumes exactly its bytes, or nothing.
        let mut r = Reader::new(&[0xa3, b'k', b'e', b'y', 7]);
        assert_eq!(r.expect(&[0xa3, b'k', b'e', b'x']), None);
        assert_eq!(r.expect(&[0xa3, b'k', b'e', b'y']), Some(()));
        assert_eq!(r.expect(&[7, 8]), None);
        assert_eq!(r.uint(), Some(7));
        assert_eq!(r.end(), Some(()));
        // A 4-byte length larger than the input.
        assert_eq!(Reader::new(&[0xc6, 0xff, 0xff, 0xff, 0xff, 1]).bin(), None);
    }
}
