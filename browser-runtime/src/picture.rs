//! The picture of a tab a card shows: the card's element outlined (the rest dimmed), and every
//! field whose value a card would redact painted over, in the pixels themselves, so no copy of
//! the picture holds what the card does not show.

use serde::Deserialize;
use serde_json::json;

use crate::fence::Handle;
use crate::guard::{self, PageRead};
use crate::page::{READ, ReadError};

/// A box in the viewport's CSS pixels: left, top, width, height.
type CssBox = [f64; 4];

#[derive(Debug, Clone, Deserialize)]
struct Field {
    #[serde(rename = "box")]
    at: CssBox,
    kind: classifier::FieldKind,
    #[serde(default)]
    value: String,
    /// Too long to be sent: masked unread.
    #[serde(default)]
    long: bool,
}

/// What one read of the page says the picture must paint over and outline.
#[derive(Debug, Clone, Deserialize)]
pub struct Marks {
    pub page: PageRead,
    width: f64,
    #[serde(default)]
    fields: Vec<Field>,
    /// Embedded documents and plugins the read cannot look into, painted over whole.
    #[serde(default)]
    opaque: Vec<CssBox>,
    /// Hosts of closed shadow roots (found over DevTools, never by the page's read).
    #[serde(skip)]
    pub closed: Vec<CssBox>,
    #[serde(default)]
    target: Option<CssBox>,
    /// The card's element was asked for and is still in the document.
    #[serde(default)]
    asked: bool,
    /// Every element was walked: no field was missed.
    #[serde(default)]
    whole: bool,
}

/// Where the card's element is in the picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    None,
    Outlined,
    NotInView,
    Gone,
}

/// Why no picture can be shown safely.
#[derive(Debug, thiserror::Error)]
pub enum PictureError {
    #[error("the page is too large to be read whole, so its sensitive fields cannot all be masked")]
    NotWhole,
    #[error("the browser's picture could not be read: {0}")]
    Image(String),
}

/// Holds the page still (`true`) while its picture is read and taken, or lets it go: no page
/// script runs (timers, handlers) and no animation moves, so no field can move between the read
/// of its box and the picture.
pub async fn hold_still(h: &Handle, still: bool) -> Result<(), crate::fence::FenceError> {
    let (session, _) = h.tab().ok_or(crate::fence::FenceError::NoEndpoint)?;
    let session = Some(session.as_str());
    h.call(session, "Emulation.setScriptExecutionDisabled", json!({ "value": still })).await?;
    if still {
        h.call(session, "Animation.enable", json!({})).await?;
    }
    h.call(session, "Animation.setPlaybackRate", json!({ "playbackRate": if still { 0.0 } else { 1.0 } })).await?;
    Ok(())
}

/// Reads the fields and the card's element (`slot` in snapshot `snapshot_id`) of the page now.
pub async fn read(h: &Handle, snapshot_id: &str, slot: Option<usize>) -> Result<Marks, ReadError> {
    let slot = slot.map_or(json!(-1), |s| json!(s));
    let v = guard::call_in_world(h, &READ, &[json!("picture"), json!(snapshot_id), slot], true).await;
    guard::release_reads(h);
    let v = v?;
    let json = v["value"][0].as_str().ok_or_else(|| ReadError::Shape("the picture's read is missing".into()))?;
    serde_json::from_str(json).map_err(|e| ReadError::Shape(e.to_string()))
}

/// Whether a card would redact this field's value (one too long to read is masked unread).
fn redacted(f: &Field) -> bool {
    f.long || crate::review::sensitive(f.kind) || classifier::text_shape::is_credential_shaped(&f.value)
}

impl Marks {
    /// Every box to paint over: redacted fields, embedded documents, closed shadow hosts.
    fn covered(&self) -> impl Iterator<Item = (CssBox, f64)> + '_ {
        let fields = self.fields.iter().filter(|f| redacted(f)).map(|f| (f.at, 2.0));
        fields.chain(self.opaque.iter().chain(&self.closed).map(|b| (*b, 0.0)))
    }
}

/// The boxes (in the viewport's CSS pixels) of every element that hosts a closed shadow root:
/// what is inside one no read can see, so a picture paints each over whole. Read over DevTools
/// (DOM.getDocument, piercing), which the page cannot hide them from.
pub async fn closed_hosts(h: &Handle) -> Result<Vec<CssBox>, crate::fence::FenceError> {
    let (session, _) = h.tab().ok_or(crate::fence::FenceError::NoEndpoint)?;
    let session = Some(session.as_str());
    let doc = h.call(session, "DOM.getDocument", json!({ "depth": -1, "pierce": true })).await;
    let mut hosts = Vec::new();
    if let Ok(doc) = &doc {
        let mut stack = vec![&doc["root"]];
        while let Some(node) = stack.pop() {
            let roots = node["shadowRoots"].as_array();
            if roots.is_some_and(|r| r.iter().any(|r| r["shadowRootType"] == "closed")) {
                hosts.extend(node["backendNodeId"].as_i64());
            }
            for key in ["children", "shadowRoots"] {
                stack.extend(node[key].as_array().into_iter().flatten());
            }
            if node["contentDocument"].is_object() {
                stack.push(&node["contentDocument"]);
            }
        }
    }
    let mut boxes = Vec::new();
    for id in hosts {
        // A host the browser does not render has no box, and nothing of it is in the picture.
        let Ok(model) = h.call(session, "DOM.getBoxModel", json!({ "backendNodeId": id })).await else { continue };
        let quad: Vec<f64> =
            model["model"]["border"].as_array().into_iter().flatten().filter_map(|v| v.as_f64()).collect();
        if quad.len() == 8 {
            let xs = [quad[0], quad[2], quad[4], quad[6]];
            let ys = [quad[1], quad[3], quad[5], quad[7]];
            let (l, r) = (xs.iter().copied().fold(f64::MAX, f64::min), xs.iter().copied().fold(f64::MIN, f64::max));
            let (t, b) = (ys.iter().copied().fold(f64::MAX, f64::min), ys.iter().copied().fold(f64::MIN, f64::max));
            boxes.push([l, t, r - l, b - t]);
        }
    }
    // The DOM domain, which getDocument turned on, would report every change from now on.
    let _ = h.call(session, "DOM.disable", json!({})).await;
    doc?;
    Ok(boxes)
}

/// `png` with every redacted field of `reads` painted over (each read is one moment: the fields
/// of both are masked, so a page that moved between the reads and the picture is still covered)
/// and, from the last read, the card's element outlined.
pub fn draw(png: &[u8], reads: &[&Marks], element_asked: bool) -> Result<(Vec<u8>, Element, u32), PictureError> {
    if reads.iter().any(|m| !m.whole) {
        return Err(PictureError::NotWhole);
    }
    let mut image = Image::decode(png)?;
    let last = reads.last();
    let element = match last {
        _ if !element_asked => Element::None,
        Some(m) if m.asked => match m.target {
            Some(t) if t[2] > 0.0 && t[3] > 0.0 => {
                let scale = f64::from(image.width) / m.width.max(1.0);
                let at = image.pixels(t, scale, 0.0);
                if at.2 > at.0 && at.3 > at.1 {
                    image.spotlight(at);
                    Element::Outlined
                } else {
                    Element::NotInView
                }
            }
            _ => Element::NotInView,
        },
        _ => Element::Gone,
    };
    // Painted last, so nothing drawn after can lighten them.
    for m in reads {
        let scale = f64::from(image.width) / m.width.max(1.0);
        for (at, grow) in m.covered() {
            image.fill(image.pixels(at, scale, grow), [95, 99, 104]);
        }
    }
    // The owner is told how many: the most either read saw.
    let masked = reads.iter().map(|m| m.covered().count()).max().unwrap_or(0);
    Ok((image.encode()?, element, u32::try_from(masked).unwrap_or(u32::MAX)))
}

/// An 8-bit image with 1 to 4 channels, as the browser's PNG decodes.
struct Image {
    width: u32,
    height: u32,
    channels: usize,
    data: Vec<u8>,
}

/// A box in image pixels: left, top, right, bottom (exclusive), clipped to the image.
type Px = (u32, u32, u32, u32);

impl Image {
    fn decode(png: &[u8]) -> Result<Self, PictureError> {
        let bad = |e: png::DecodingError| PictureError::Image(e.to_string());
        let mut decoder = png::Decoder::new(std::io::Cursor::new(png));
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info().map_err(bad)?;
        let size = reader.output_buffer_size().ok_or_else(|| PictureError::Image("too large".into()))?;
        let mut data = vec![0; size];
        let info = reader.next_frame(&mut data).map_err(bad)?;
        data.truncate(info.buffer_size());
        let channels = info.color_type.samples();
        if info.bit_depth != png::BitDepth::Eight || data.len() != info.width as usize * info.height as usize * channels
        {
            return Err(PictureError::Image("an unexpected pixel layout".into()));
        }
        Ok(Self { width: info.width, height: info.height, channels, data })
    }

    fn encode(&self) -> Result<Vec<u8>, PictureError> {
        let bad = |e: png::EncodingError| PictureError::Image(e.to_string());
        let color = match self.channels {
            1 => png::ColorType::Grayscale,
            2 => png::ColorType::GrayscaleAlpha,
            3 => png::ColorType::Rgb,
            _ => png::ColorType::Rgba,
        };
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, self.width, self.height);
        encoder.set_color(color);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder.write_header().map_err(bad)?;
        writer.write_image_data(&self.data).map_err(bad)?;
        writer.finish().map_err(bad)?;
        Ok(out)
    }

    /// `b` (CSS pixels) in image pixels, grown by `grow` CSS pixels on every side, clipped.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to 0..=the image's size
    fn pixels(&self, b: CssBox, scale: f64, grow: f64) -> Px {
        let clip = |v: f64, max: u32| (v * scale).floor().clamp(0.0, f64::from(max)) as u32;
        let right = |v: f64, max: u32| (v * scale).ceil().clamp(0.0, f64::from(max)) as u32;
        (
            clip(b[0] - grow, self.width),
            clip(b[1] - grow, self.height),
            right(b[0] + b[2] + grow, self.width),
            right(b[1] + b[3] + grow, self.height),
        )
    }

    fn put(&mut self, x: u32, y: u32, rgb: [u8; 3]) {
        let i = (y as usize * self.width as usize + x as usize) * self.channels;
        match self.channels {
            1 | 2 => {
                self.data[i] =
                    u8::try_from((u16::from(rgb[0]) + u16::from(rgb[1]) + u16::from(rgb[2])) / 3).unwrap_or(u8::MAX)
            }
            _ => self.data[i..i + 3].copy_from_slice(&rgb),
        }
        if self.channels == 2 || self.channels == 4 {
            self.data[i + self.channels - 1] = 255;
        }
    }

    fn fill(&mut self, (l, t, r, b): Px, rgb: [u8; 3]) {
        for y in t..b {
            for x in l..r {
                self.put(x, y, rgb);
            }
        }
    }

    /// Dims everything outside `at` and draws a ring around it: a page cannot paint a ring of its
    /// own that looks like this one, since the dimming falls on everything it draws elsewhere.
    fn spotlight(&mut self, at: Px) {
        const RING: u32 = 4;
        let (l, t, r, b) = at;
        let colour = self.channels.min(3);
        for y in 0..self.height {
            for x in 0..self.width {
                if x >= l && x < r && y >= t && y < b {
                    continue;
                }
                let i = (y as usize * self.width as usize + x as usize) * self.channels;
                // Towards a mid grey: still readable, plainly set back from the element.
                for c in &mut self.data[i..i + colour] {
                    *c = *c / 2 + 64;
                }
            }
        }
        let grow = |v: u32, by: u32, max: u32| (v + by).min(max);
        let outer =
            (l.saturating_sub(RING), t.saturating_sub(RING), grow(r, RING, self.width), grow(b, RING, self.height));
        let orange = [255, 122, 0];
        self.fill((outer.0, outer.1, outer.2, t), orange);
        self.fill((outer.0, b, outer.2, outer.3), orange);
        self.fill((outer.0, t, l, b), orange);
        self.fill((r, t, outer.2, b), orange);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(fields: Vec<Field>, target: Option<CssBox>) -> Marks {
        Marks {
            page: PageRead::default(),
            width: 40.0,
            fields,
            opaque: vec![],
            closed: vec![],
            target,
            asked: target.is_some(),
            whole: true,
        }
    }

    fn png_of(w: u32, h: u32, rgba: [u8; 4]) -> Vec<u8> {
        let image = Image { width: w, height: h, channels: 4, data: rgba.repeat((w * h) as usize) };
        image.encode().unwrap()
    }

    fn pixel(png: &[u8], x: u32, y: u32) -> Vec<u8> {
        let image = Image::decode(png).unwrap();
        let i = (y as usize * image.width as usize + x as usize) * image.channels;
        image.data[i..i + image.channels].to_vec()
    }

    #[test]
    fn a_redacted_field_is_painted_over_and_an_ordinary_one_is_not() {
        let white = png_of(40, 40, [255, 255, 255, 255]);
        let field = |at, kind, value: &str| Field { at, kind, value: value.into(), long: false };
        let fields = vec![
            field([0.0, 0.0, 10.0, 10.0], classifier::FieldKind::Password, ""),
            field([20.0, 0.0, 10.0, 10.0], classifier::FieldKind::Text, "Ana"),
            field([0.0, 20.0, 10.0, 10.0], classifier::FieldKind::Text, "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        ];
        let (out, element, masked) = draw(&white, &[&marks(fields, None)], false).unwrap();
        assert_eq!((element, masked), (Element::None, 2));
        assert_eq!(pixel(&out, 5, 5), [95, 99, 104, 255], "a password field");
        assert_eq!(pixel(&out, 25, 5), [255, 255, 255, 255], "an ordinary field");
        assert_eq!(pixel(&out, 5, 25), [95, 99, 104, 255], "credential-shaped text");
    }

    #[test]
    fn the_cards_element_is_outlined_and_the_rest_dimmed() {
        let white = png_of(80, 80, [255, 255, 255, 255]);
        // The viewport is 40 CSS pixels wide and the picture 80: twice the scale.
        let (out, element, _) = draw(&white, &[&marks(vec![], Some([10.0, 10.0, 10.0, 10.0]))], true).unwrap();
        assert_eq!(element, Element::Outlined);
        assert_eq!(pixel(&out, 30, 30), [255, 255, 255, 255], "the element itself");
        assert_eq!(pixel(&out, 18, 30), [255, 122, 0, 255], "its ring");
        assert_eq!(pixel(&out, 70, 70), [191, 191, 191, 255], "the rest, dimmed");
        let gone = Marks { asked: false, ..marks(vec![], None) };
        assert_eq!(draw(&white, &[&gone], true).unwrap().1, Element::Gone);
        let away = marks(vec![], Some([100.0, 100.0, 10.0, 10.0]));
        assert_eq!(draw(&white, &[&away], true).unwrap().1, Element::NotInView);
        let partial = Marks { whole: false, ..marks(vec![], None) };
        assert!(draw(&white, &[&partial], false).is_err(), "a page not read whole gets no picture");
    }
}
