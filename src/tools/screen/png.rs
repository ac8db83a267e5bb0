//! The size of a PNG, from its header: what `screenshot` reports and the history
//! keeps, checked rather than trusted from the arguments grim was given.

/// The width and height in a PNG's `IHDR`, or `None` if `bytes` is no PNG.
pub fn size(bytes: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if bytes.get(..8)? != SIGNATURE || bytes.get(12..16)? != b"IHDR" {
        return None;
    }
    let be = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    Some((be(16)?, be(20)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_gives_the_size() {
        let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        png.extend_from_slice(&640u32.to_be_bytes());
        png.extend_from_slice(&480u32.to_be_bytes());
        assert_eq!(size(&png), Some((640, 480)));
        assert_eq!(size(b"GIF89a"), None);
        assert_eq!(size(&png[..18]), None);
    }
}
