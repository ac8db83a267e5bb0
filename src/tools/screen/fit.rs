//! A PNG made to fit: decoded, cut to a rectangle of its pixels, scaled down so its
//! longest side is at most `[screen] max_edge`, and encoded again. The portal hands
//! back the whole screen at its full size (grim scales as it captures); this is what
//! makes the two the same for the model.
//!
//! Invariants: never scaled up; the output is always 8-bit (16-bit samples are
//! stripped, palettes and low bit depths expanded); a source larger than
//! [`MAX_DECODED_BYTES`] once decoded is refused before its pixels are allocated.

use fast_image_resize::images::Image;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

/// The most memory a decoded source may take: an 8K screen (7680x4320) in RGBA is
/// 133 MB.
pub const MAX_DECODED_BYTES: usize = 160 * 1024 * 1024;

/// A rectangle of an image's pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixelRect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// The fitted image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub png: Vec<u8>,
    pub width: u32,
    pub height: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error("the image is no PNG that can be read: {0}")]
    Decode(#[from] png::DecodingError),
    #[error("the region {0:?} lies outside the {1}x{2} screenshot")]
    Outside(PixelRect, u32, u32),
    #[error("cannot scale the image: {0}")]
    Scale(String),
    #[error("cannot encode the image: {0}")]
    Encode(#[from] png::EncodingError),
}

/// `bytes` (a PNG) cut to `crop` (clipped to the image) and scaled so its longest side
/// is at most `max_edge`.
pub fn fit(bytes: &[u8], crop: Option<PixelRect>, max_edge: u32) -> Result<Fitted, FitError> {
    let (pixels, width, height, color) = decode(bytes)?;
    let area = match crop {
        Some(r) => clip(r, width, height).ok_or(FitError::Outside(r, width, height))?,
        None => PixelRect {
            x: 0,
            y: 0,
            width,
            height,
        },
    };
    let (out_w, out_h) = scaled(area.width, area.height, max_edge);
    let pixels = if (out_w, out_h, area) == (width, height, full(width, height)) {
        pixels
    } else {
        resize(pixels, (width, height), area, (out_w, out_h), color)?
    };
    Ok(Fitted {
        png: encode(&pixels, out_w, out_h, color)?,
        width: out_w,
        height: out_h,
    })
}

/// The size `width`x`height` takes with its longest side at most `max_edge` (never
/// larger than it is, never a side of 0).
pub fn scaled(width: u32, height: u32, max_edge: u32) -> (u32, u32) {
    let longest = width.max(height);
    if longest <= max_edge {
        return (width, height);
    }
    let scale = f64::from(max_edge) / f64::from(longest);
    let side = |v: u32| ((f64::from(v) * scale).round() as u32).clamp(1, max_edge);
    (side(width), side(height))
}

fn full(width: u32, height: u32) -> PixelRect {
    PixelRect {
        x: 0,
        y: 0,
        width,
        height,
    }
}

/// `r` within a `width`x`height` image; `None` when nothing of it is.
fn clip(r: PixelRect, width: u32, height: u32) -> Option<PixelRect> {
    let right = r.x.saturating_add(r.width).min(width);
    let bottom = r.y.saturating_add(r.height).min(height);
    (r.x < right && r.y < bottom).then(|| PixelRect {
        x: r.x,
        y: r.y,
        width: right - r.x,
        height: bottom - r.y,
    })
}

/// The 8-bit pixels, size and colour type of a PNG.
fn decode(bytes: &[u8]) -> Result<(Vec<u8>, u32, u32, png::ColorType), FitError> {
    let mut decoder = png::Decoder::new_with_limits(
        std::io::Cursor::new(bytes),
        png::Limits {
            bytes: MAX_DECODED_BYTES,
        },
    );
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info()?;
    let size = reader
        .output_buffer_size()
        .filter(|s| *s <= MAX_DECODED_BYTES)
        .ok_or(png::DecodingError::LimitsExceeded)?;
    let mut pixels = vec![0; size];
    let info = reader.next_frame(&mut pixels)?;
    pixels.truncate(info.buffer_size());
    let (color, _) = reader.output_color_type();
    Ok((pixels, info.width, info.height, color))
}

/// Scales `area` of the image to `out_w`x`out_h` as RGBA and gives back the source's
/// channels. fast_image_resize is built with `only_u8x4`: its other pixel types, each
/// in every SIMD variant, were 2.8 MB of the binary (BENCHMARKS.md, "Issue 42 §7"),
/// and widening a screenshot to four channels and back costs a few milliseconds.
fn resize(
    pixels: Vec<u8>,
    (width, height): (u32, u32),
    area: PixelRect,
    (out_w, out_h): (u32, u32),
    color: png::ColorType,
) -> Result<Vec<u8>, FitError> {
    let failed = |e: &dyn std::fmt::Display| FitError::Scale(e.to_string());
    let src = Image::from_vec_u8(width, height, to_rgba(pixels, color), PixelType::U8x4)
        .map_err(|e| failed(&e))?;
    let mut dst = Image::new(out_w, out_h, PixelType::U8x4);
    // Lanczos keeps a window's text readable when a 2560-pixel screen becomes 1280.
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Convolution(FilterType::Lanczos3))
        .use_alpha(has_alpha(color))
        .crop(
            f64::from(area.x),
            f64::from(area.y),
            f64::from(area.width),
            f64::from(area.height),
        );
    Resizer::new()
        .resize(&src, &mut dst, &options)
        .map_err(|e| failed(&e))?;
    Ok(from_rgba(dst.into_vec(), color))
}

fn has_alpha(color: png::ColorType) -> bool {
    match color {
        png::ColorType::GrayscaleAlpha | png::ColorType::Rgba => true,
        png::ColorType::Grayscale | png::ColorType::Rgb | png::ColorType::Indexed => false,
    }
}

/// The decoder's 8-bit pixels of `color` as RGBA (opaque where the source has no alpha).
fn to_rgba(pixels: Vec<u8>, color: png::ColorType) -> Vec<u8> {
    let widen = |n: usize, f: fn(&[u8]) -> [u8; 4]| pixels.chunks_exact(n).flat_map(f).collect();
    match color {
        png::ColorType::Rgba => pixels,
        // EXPAND turns a palette into RGB(A): Indexed never comes out of the decoder.
        png::ColorType::Rgb | png::ColorType::Indexed => widen(3, |p| [p[0], p[1], p[2], 255]),
        png::ColorType::GrayscaleAlpha => widen(2, |p| [p[0], p[0], p[0], p[1]]),
        png::ColorType::Grayscale => widen(1, |p| [p[0], p[0], p[0], 255]),
    }
}

/// RGBA pixels back in `color`'s channels (a grey source stays grey: R = G = B).
fn from_rgba(rgba: Vec<u8>, color: png::ColorType) -> Vec<u8> {
    let pixels = rgba.chunks_exact(4);
    match color {
        png::ColorType::Rgba => rgba,
        png::ColorType::Rgb | png::ColorType::Indexed => {
            pixels.flat_map(|p| [p[0], p[1], p[2]]).collect()
        }
        png::ColorType::GrayscaleAlpha => pixels.flat_map(|p| [p[0], p[3]]).collect(),
        png::ColorType::Grayscale => pixels.map(|p| p[0]).collect(),
    }
}

fn encode(
    pixels: &[u8],
    width: u32,
    height: u32,
    color: png::ColorType,
) -> Result<Vec<u8>, FitError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(match color {
        png::ColorType::Indexed => png::ColorType::Rgb,
        c @ (png::ColorType::Grayscale
        | png::ColorType::GrayscaleAlpha
        | png::ColorType::Rgb
        | png::ColorType::Rgba) => c,
    });
    encoder.set_depth(png::BitDepth::Eight);
    // Balanced, not Fast: ~100 ms more once per screenshot (release, 2560x1440 → 1280),
    // 3.5 times fewer bytes (205 KB against 731 KB) in every request that carries the
    // image afterwards (BENCHMARKS.md, "portal path").
    encoder.set_compression(png::Compression::Balanced);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()?;
    Ok(out)
}

/// A `width`x`height` RGB PNG that looks like a desktop to an encoder: a flat
/// background, three windows with title bars and lines of "text" (dark glyph cells
/// on white, each cell's ink pattern from its position), for the tests and the bench.
pub fn test_png(width: u32, height: u32) -> Vec<u8> {
    let windows = [
        (0.05, 0.08, 0.5, 0.6),
        (0.4, 0.3, 0.55, 0.6),
        (0.1, 0.7, 0.3, 0.25),
    ];
    let mut pixels = Vec::with_capacity(width as usize * height as usize * 3);
    for y in 0..height {
        for x in 0..width {
            let (fx, fy) = (
                f64::from(x) / f64::from(width),
                f64::from(y) / f64::from(height),
            );
            let inside = windows.iter().rposition(|(wx, wy, ww, wh)| {
                fx >= *wx && fx < wx + ww && fy >= *wy && fy < wy + wh
            });
            let rgb = match inside {
                None => [46, 52, 64],
                Some(i) => {
                    let top = (windows[i].1 * f64::from(height)) as u32;
                    let left = (windows[i].0 * f64::from(width)) as u32;
                    let (wx, wy) = (x - left, y - top);
                    if wy < 28 {
                        [60 + i as u8 * 30, 90, 140]
                    } else {
                        // 8x16 glyph cells on 24-pixel lines; a cell is inked or blank.
                        let (cx, line) = (wx / 8, (wy - 28) / 24);
                        let cell =
                            (cx.wrapping_mul(2_654_435_761) ^ line.wrapping_mul(40_503)) >> 7;
                        let in_line = (wy - 28) % 24 < 16 && wx % 8 != 0 && cx % 11 != 10;
                        let ink = in_line && cell % 5 != 0 && (wx * 7 + wy * 3 + cell) % 3 == 0;
                        if ink { [30, 30, 30] } else { [250, 250, 250] }
                    }
                }
            };
            pixels.extend_from_slice(&rgb);
        }
    }
    encode(&pixels, width, height, png::ColorType::Rgb).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_screen_is_scaled_to_max_edge_and_a_small_one_is_left() {
        let big = test_png(2560, 1440);
        let fitted = fit(&big, None, 1280).unwrap();
        assert_eq!((fitted.width, fitted.height), (1280, 720));
        assert_eq!(
            crate::tools::screen::png::size(&fitted.png),
            Some((1280, 720))
        );
        let small = test_png(300, 200);
        let same = fit(&small, None, 1280).unwrap();
        assert_eq!((same.width, same.height), (300, 200));
    }

    #[test]
    fn a_crop_is_clipped_to_the_image_then_scaled() {
        let png = test_png(800, 600);
        let crop = PixelRect {
            x: 600,
            y: 100,
            width: 400,
            height: 300,
        };
        let fitted = fit(&png, Some(crop), 1280).unwrap();
        assert_eq!((fitted.width, fitted.height), (200, 300));
        let fitted = fit(&png, Some(crop), 200).unwrap();
        assert_eq!((fitted.width, fitted.height), (133, 200));
        let outside = PixelRect { x: 900, ..crop };
        assert!(matches!(
            fit(&png, Some(outside), 1280),
            Err(FitError::Outside(..))
        ));
    }

    fn uniform_png(width: u32, height: u32, color: png::ColorType, pixel: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, width, height);
        encoder.set_color(color);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().unwrap();
        writer
            .write_image_data(&pixel.repeat((width * height) as usize))
            .unwrap();
        writer.finish().unwrap();
        out
    }

    #[test]
    fn every_colour_type_is_scaled_in_its_own_channels_and_colours() {
        for (color, pixel) in [
            (png::ColorType::Grayscale, vec![90]),
            (png::ColorType::GrayscaleAlpha, vec![90, 200]),
            (png::ColorType::Rgb, vec![10, 120, 230]),
            (png::ColorType::Rgba, vec![10, 120, 230, 200]),
        ] {
            let fitted = fit(&uniform_png(64, 32, color, &pixel), None, 16).unwrap();
            assert_eq!((fitted.width, fitted.height), (16, 8));
            let (pixels, width, height, out) = decode(&fitted.png).unwrap();
            assert_eq!((width, height, out), (16, 8, color));
            assert_eq!(pixels.len(), 16 * 8 * pixel.len(), "{color:?}");
            for p in pixels.chunks_exact(pixel.len()) {
                let off = p.iter().zip(&pixel).map(|(a, b)| a.abs_diff(*b)).max();
                assert!(off <= Some(1), "{color:?}: {p:?} for {pixel:?}");
            }
        }
    }

    #[test]
    fn what_is_no_png_is_an_error() {
        assert!(matches!(
            fit(b"GIF89a....", None, 1280),
            Err(FitError::Decode(_))
        ));
    }

    #[test]
    fn sides_never_reach_zero_or_grow() {
        assert_eq!(scaled(4000, 10, 1000), (1000, 3));
        assert_eq!(scaled(100_000, 1, 1000), (1000, 1));
        assert_eq!(scaled(640, 480, 1280), (640, 480));
    }
}
