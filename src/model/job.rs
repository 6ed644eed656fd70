//! A job request from the outside, validated once into `JobRequest`; its
//! canonical form and SHA-256 (what an idempotency key is bound to); its
//! price (`quote`); and the job states with their allowed transitions.

use super::catalogue::{style, Catalogue, Resolution, Strength, TargetKind, VideoPrice};
use super::credits::Credits;
use super::ids::AssetId;
use super::money::Usd;
use rust_decimal::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const DESCRIPTION_LEN_MAX: usize = 500;
pub const PROMPT_LEN_MAX: usize = 1000;
pub const WEBHOOK_URL_LEN_MAX: usize = 2048;

/// A validated request. Field order here is the canonical order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobRequest {
    ImageEdit(ImageEdit),
    Video(Video),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ImageEdit {
    pub source: AssetId,
    pub target: Target,
    #[cfg_attr(feature = "server", schema(value_type = super::catalogue::StyleId))]
    pub style: String,
    pub strength: Strength,
    pub webhook_url: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Target {
    pub kind: TargetKind,
    pub description: String,
    pub mask: Option<AssetId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Video {
    pub prompt: String,
    pub model: String,
    pub duration_s: u32,
    pub resolution: Resolution,
    pub source: Option<AssetId>,
    pub webhook_url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    ImageEdit,
    Video,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::ImageEdit => "image_edit",
            JobKind::Video => "video",
        }
    }

    pub fn parse(s: &str) -> Option<JobKind> {
        match s {
            "image_edit" => Some(JobKind::ImageEdit),
            "video" => Some(JobKind::Video),
            _ => None,
        }
    }
}

// ---- the raw shapes, exactly as API.md writes them ----
//
// `parse_request` reads a body into these, then validates every field with
// a message naming it. They are also the request bodies the OpenAPI
// document describes, with the constraints `parse_request` checks.

/// `POST /v1/jobs` for an image edit.
#[derive(Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawImageEdit {
    #[allow(dead_code)]
    #[cfg_attr(feature = "server", schema(value_type = String, pattern = "^image_edit$", example = "image_edit"))]
    kind: String,
    /// An asset id returned by `POST /v1/assets`.
    #[cfg_attr(feature = "server", schema(value_type = AssetId))]
    source: String,
    target: RawTarget,
    #[cfg_attr(feature = "server", schema(value_type = super::catalogue::StyleId))]
    style: String,
    #[cfg_attr(feature = "server", schema(value_type = Strength))]
    strength: String,
    #[serde(default)]
    #[cfg_attr(
        feature = "server",
        schema(pattern = "^(https?://[!-~]+)?$", max_length = 2048)
    )]
    webhook_url: Option<String>,
}

/// What to change in the photo.
#[derive(Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    #[cfg_attr(feature = "server", schema(value_type = TargetKind))]
    kind: String,
    #[serde(default)]
    #[cfg_attr(
        feature = "server",
        schema(max_length = 500, example = "the dog on the left")
    )]
    description: Option<String>,
    /// Required for `area`: an uploaded mask (painted pixels may change).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Option<AssetId>))]
    mask: Option<String>,
}

/// `POST /v1/jobs` for a video.
#[derive(Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RawVideo {
    #[allow(dead_code)]
    #[cfg_attr(feature = "server", schema(value_type = String, pattern = "^video$", example = "video"))]
    kind: String,
    #[cfg_attr(
        feature = "server",
        schema(min_length = 1, max_length = 1000, example = "a paper boat on a pond")
    )]
    prompt: String,
    /// A video model of `GET /v1/catalogue`; its default when absent.
    #[serde(default)]
    model: Option<String>,
    /// A duration the model accepts (`GET /v1/catalogue`).
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 60, example = 5))]
    duration_s: u32,
    #[cfg_attr(feature = "server", schema(value_type = Resolution))]
    resolution: String,
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Option<AssetId>))]
    source: Option<String>,
    #[serde(default)]
    #[cfg_attr(
        feature = "server",
        schema(pattern = "^(https?://[!-~]+)?$", max_length = 2048)
    )]
    webhook_url: Option<String>,
}

/// Each invalid field and what is wrong with it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldErrors(pub BTreeMap<String, String>);

impl FieldErrors {
    pub(crate) fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0
            .entry(field.to_string())
            .or_insert_with(|| message.into());
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One line naming every field.
    pub fn summary(&self) -> String {
        self.0
            .iter()
            .map(|(f, m)| format!("{f}: {m}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn clean_text(
    errors: &mut FieldErrors,
    field: &str,
    s: &str,
    max: usize,
    required: bool,
) -> String {
    let t = s.trim();
    if required && t.is_empty() {
        errors.add(field, "is required");
    }
    if t.chars().count() > max {
        errors.add(field, format!("must be at most {max} characters"));
    }
    if t.chars().any(|c| c.is_control() && c != '\n') {
        errors.add(field, "must not contain control characters");
    }
    t.to_string()
}

fn asset_id(errors: &mut FieldErrors, field: &str, s: &str) -> Option<AssetId> {
    match s.trim().parse::<AssetId>() {
        Ok(id) => Some(id),
        Err(_) => {
            errors.add(field, "must be an asset id returned by POST /v1/assets");
            None
        }
    }
}

fn webhook(errors: &mut FieldErrors, raw: Option<String>) -> Option<String> {
    let url = raw?.trim().to_string();
    if url.is_empty() {
        return None;
    }
    let ok_scheme = url.starts_with("https://") || url.starts_with("http://");
    if !ok_scheme
        || url.len() > WEBHOOK_URL_LEN_MAX
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        errors.add(
            "webhook_url",
            format!("must be an http(s) URL of at most {WEBHOOK_URL_LEN_MAX} characters"),
        );
    }
    Some(url)
}

/// Parses and validates a request body against a catalogue. Unknown fields,
/// wrong types and missing fields are errors naming the field.
pub fn parse_request(
    body: &serde_json::Value,
    catalogue: &Catalogue,
) -> Result<JobRequest, FieldErrors> {
    let mut errors = FieldErrors::default();
    let Some(obj) = body.as_object() else {
        errors.add("body", "must be a JSON object");
        return Err(errors);
    };
    match obj.get("kind").and_then(|k| k.as_str()).unwrap_or("") {
        "image_edit" => {
            let raw = serde_json::from_value(body.clone()).map_err(|e| serde_errors(&e))?;
            image_edit(raw, errors)
        }
        "video" => {
            let raw = serde_json::from_value(body.clone()).map_err(|e| serde_errors(&e))?;
            video(raw, catalogue, errors)
        }
        "" => {
            errors.add("kind", "is required: image_edit or video");
            Err(errors)
        }
        _ => {
            errors.add("kind", "must be image_edit or video");
            Err(errors)
        }
    }
}

/// An image edit's fields, each checked; every refusal is collected.
fn image_edit(raw: RawImageEdit, mut errors: FieldErrors) -> Result<JobRequest, FieldErrors> {
    let source = asset_id(&mut errors, "source", &raw.source);
    let target_kind = TargetKind::parse(&raw.target.kind);
    if target_kind.is_none() {
        errors.add("target.kind", "must be pet, person, background or area");
    }
    let description = clean_text(
        &mut errors,
        "target.description",
        raw.target.description.as_deref().unwrap_or(""),
        DESCRIPTION_LEN_MAX,
        false,
    );
    let mask = match (target_kind, raw.target.mask.as_deref()) {
        (Some(TargetKind::Area), Some(m)) => asset_id(&mut errors, "target.mask", m),
        (Some(TargetKind::Area), None) => {
            errors.add("target.mask", "is required when target.kind is area");
            None
        }
        (_, Some(_)) => {
            errors.add("target.mask", "is only allowed when target.kind is area");
            None
        }
        (_, None) => None,
    };
    if style(&raw.style).is_none() {
        errors.add(
            "style",
            "is not one of the fifteen styles in GET /v1/catalogue",
        );
    }
    let strength = Strength::parse(&raw.strength);
    if strength.is_none() {
        errors.add("strength", "must be subtle, balanced or strong");
    }
    let webhook_url = webhook(&mut errors, raw.webhook_url);
    match (source, target_kind, strength) {
        (Some(source), Some(kind), Some(strength)) if errors.is_empty() => {
            Ok(JobRequest::ImageEdit(ImageEdit {
                source,
                target: Target {
                    kind,
                    description,
                    mask,
                },
                style: raw.style,
                strength,
                webhook_url,
            }))
        }
        _ => Err(errors),
    }
}

/// A video's fields, checked against the catalogue's video models.
fn video(
    raw: RawVideo,
    catalogue: &Catalogue,
    mut errors: FieldErrors,
) -> Result<JobRequest, FieldErrors> {
    let prompt = clean_text(&mut errors, "prompt", &raw.prompt, PROMPT_LEN_MAX, true);
    let model_id = raw
        .model
        .clone()
        .unwrap_or_else(|| catalogue.default_video_model.clone());
    let model = catalogue.video_model(&model_id);
    if model.is_none() {
        errors.add("model", "is not a video model in GET /v1/catalogue");
    }
    let resolution = Resolution::parse(&raw.resolution);
    match (model, resolution) {
        (_, None) => errors.add("resolution", "must be 720p or 1080p"),
        (Some(m), Some(r)) if !m.resolutions().contains(&r) => errors.add(
            "resolution",
            format!("{} is not offered by {}", r.as_str(), m.id),
        ),
        _ => {}
    }
    if let Some(m) = model {
        if !m.durations_s.contains(&raw.duration_s) {
            errors.add(
                "duration_s",
                format!("{} accepts {:?} seconds", m.id, m.durations_s),
            );
        }
    }
    let source = raw
        .source
        .as_deref()
        .and_then(|s| asset_id(&mut errors, "source", s));
    let webhook_url = webhook(&mut errors, raw.webhook_url);
    match resolution {
        Some(resolution) if errors.is_empty() => Ok(JobRequest::Video(Video {
            prompt,
            model: model_id,
            duration_s: raw.duration_s,
            resolution,
            source,
            webhook_url,
        })),
        _ => Err(errors),
    }
}

/// serde's message ("unknown field `x`, expected ...") names the field.
fn serde_errors(e: &serde_json::Error) -> FieldErrors {
    let msg = e.to_string();
    let field = msg
        .split('`')
        .nth(1)
        .filter(|_| msg.contains("field"))
        .unwrap_or("body")
        .to_string();
    let mut errors = FieldErrors::default();
    errors.add(&field, msg);
    errors
}

impl JobRequest {
    pub fn kind(&self) -> JobKind {
        match self {
            JobRequest::ImageEdit(_) => JobKind::ImageEdit,
            JobRequest::Video(_) => JobKind::Video,
        }
    }

    /// The canonical JSON: fields in a fixed order, text trimmed, defaults
    /// filled in. Key order and whitespace of the original do not matter.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// SHA-256 of the canonical JSON, hex: what an idempotency key is bound to.
    pub fn canonical_hash(&self) -> String {
        let digest = Sha256::digest(self.canonical_json().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Every asset the request refers to (they must belong to the caller).
    pub fn assets(&self) -> Vec<AssetId> {
        match self {
            JobRequest::ImageEdit(e) => std::iter::once(e.source).chain(e.target.mask).collect(),
            JobRequest::Video(v) => v.source.into_iter().collect(),
        }
    }

    pub fn webhook_url(&self) -> Option<&str> {
        match self {
            JobRequest::ImageEdit(e) => e.webhook_url.as_deref(),
            JobRequest::Video(v) => v.webhook_url.as_deref(),
        }
    }
}

/// What a request costs: the credits charged and the provider estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quote {
    pub credits: Credits,
    pub estimated_usd: Usd,
}

/// The price of a request. The page shows it and the submission charges it:
/// one function, so the price a person sees is the price they pay.
pub fn quote(catalogue: &Catalogue, request: &JobRequest) -> Quote {
    let estimated_usd = match request {
        JobRequest::ImageEdit(e) => catalogue
            .edit_model
            .per_generation
            .times(e.strength.price_factor()),
        JobRequest::Video(v) => match catalogue.video_model(&v.model).map(|m| &m.price) {
            Some(VideoPrice::PerSecond(rates)) => rates
                .get(&v.resolution)
                .copied()
                .unwrap_or(Usd::ZERO)
                .times(Decimal::from(v.duration_s)),
            Some(VideoPrice::PerGeneration(rates)) => {
                rates.get(&v.resolution).copied().unwrap_or(Usd::ZERO)
            }
            None => Usd::ZERO,
        },
    };
    Quote {
        credits: credits_for(catalogue, estimated_usd),
        estimated_usd,
    }
}

/// Whole credits covering an estimate; at least one.
fn credits_for(catalogue: &Catalogue, usd: Usd) -> Credits {
    let per = catalogue.credit_usd.decimal();
    if per <= Decimal::ZERO {
        return Credits(1);
    }
    let n = (usd.decimal() / per).ceil().to_i64().unwrap_or(i64::MAX);
    Credits(n.max(1))
}

/// Where a job is.
// Stored as TEXT with a CHECK naming exactly these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Paid for, waiting for a worker.
    Queued,
    /// A worker holds it.
    Running,
    /// Waiting for a person's decision.
    Parked,
    /// Terminal: the output exists.
    Succeeded,
    /// Terminal: it will not produce an output; refunded.
    Failed,
    /// Terminal: stopped by its owner; refunded.
    Cancelled,
}

impl JobStatus {
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Parked,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Parked => "parked",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|j| j.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    }

    /// The allowed transitions, in one place. Terminal states go nowhere:
    /// the first terminal state wins.
    pub fn can_become(self, next: JobStatus) -> bool {
        use JobStatus::*;
        matches!(
            (self, next),
            (Queued, Running | Cancelled | Failed)
                | (Running, Queued | Parked | Succeeded | Failed | Cancelled)
                | (Parked, Queued | Failed | Cancelled)
        )
    }

    /// Whether a job in this state is refundable (rule 3).
    pub fn refundable(self) -> bool {
        matches!(self, JobStatus::Failed | JobStatus::Cancelled)
    }

    pub fn label(self) -> &'static str {
        match self {
            JobStatus::Queued => "Queued",
            JobStatus::Running => "Running",
            JobStatus::Parked => "Needs review",
            JobStatus::Succeeded => "Done",
            JobStatus::Failed => "Failed",
            JobStatus::Cancelled => "Cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cat() -> Catalogue {
        Catalogue::builtin()
    }

    fn edit() -> serde_json::Value {
        json!({"kind": "image_edit", "source": "7f1e1d9e-3b7a-4c1e-9a55-0b1a2c3d4e5f",
               "target": {"kind": "pet", "description": "the dog on the left"},
               "style": "embroidery", "strength": "balanced"})
    }

    #[test]
    fn canonical_hash_ignores_key_order_and_whitespace() {
        let a = parse_request(&edit(), &cat()).unwrap();
        let reordered: serde_json::Value = serde_json::from_str(
            r#"{ "strength":"balanced","style":"embroidery",
                 "target":{"description":"  the dog on the left ","kind":"pet"},
                 "source":"7f1e1d9e-3b7a-4c1e-9a55-0b1a2c3d4e5f","kind":"image_edit" }"#,
        )
        .unwrap();
        let b = parse_request(&reordered, &cat()).unwrap();
        assert_eq!(a.canonical_hash(), b.canonical_hash());
        let mut other = edit();
        other["strength"] = json!("strong");
        let c = parse_request(&other, &cat()).unwrap();
        assert_ne!(a.canonical_hash(), c.canonical_hash());
        let mut other = edit();
        other["target"]["description"] = json!("the cat");
        assert_ne!(
            a.canonical_hash(),
            parse_request(&other, &cat()).unwrap().canonical_hash()
        );
    }

    #[test]
    fn errors_name_the_field() {
        let mut bad = edit();
        bad["style"] = json!("chalk");
        bad["strength"] = json!("max");
        let e = parse_request(&bad, &cat()).unwrap_err();
        assert!(
            e.0.contains_key("style") && e.0.contains_key("strength"),
            "{e:?}"
        );

        let mut unknown = edit();
        unknown["priority"] = json!(1);
        let e = parse_request(&unknown, &cat()).unwrap_err();
        assert!(e.0.contains_key("priority"), "{e:?}");

        let mut area = edit();
        area["target"]["kind"] = json!("area");
        let e = parse_request(&area, &cat()).unwrap_err();
        assert!(e.0.contains_key("target.mask"), "{e:?}");

        let mut wrong_type = edit();
        wrong_type["source"] = json!(12);
        assert!(parse_request(&wrong_type, &cat()).is_err());

        let e = parse_request(
            &json!({"kind": "video", "prompt": "x", "duration_s": 7, "resolution": "720p"}),
            &cat(),
        )
        .unwrap_err();
        assert!(e.0.contains_key("duration_s"), "{e:?}");
        assert!(parse_request(&json!([1, 2]), &cat()).is_err());
        assert!(parse_request(&json!({"kind": "music"}), &cat())
            .unwrap_err()
            .0
            .contains_key("kind"));
    }

    #[test]
    fn quotes_follow_the_rate_card() {
        let q = quote(&cat(), &parse_request(&edit(), &cat()).unwrap());
        assert_eq!(q.estimated_usd.to_string(), "0.040000");
        assert_eq!(q.credits, Credits(2));
        let mut strong = edit();
        strong["strength"] = json!("strong");
        let q = quote(&cat(), &parse_request(&strong, &cat()).unwrap());
        assert_eq!(
            (q.estimated_usd.to_string().as_str(), q.credits),
            ("0.060000", Credits(3))
        );
        let v = json!({"kind": "video", "prompt": "a paper boat on a pond", "duration_s": 5, "resolution": "1080p"});
        let q = quote(&cat(), &parse_request(&v, &cat()).unwrap());
        assert_eq!(
            (q.estimated_usd.to_string().as_str(), q.credits),
            ("0.175000", Credits(9))
        );
        let reel = json!({"kind": "video", "prompt": "p", "model": "local-reel", "duration_s": 6, "resolution": "720p"});
        let q = quote(&cat(), &parse_request(&reel, &cat()).unwrap());
        assert_eq!(
            (q.estimated_usd.to_string().as_str(), q.credits),
            ("0.100000", Credits(5))
        );
    }

    #[test]
    fn terminal_states_go_nowhere() {
        for s in JobStatus::ALL {
            if s.is_terminal() {
                assert!(JobStatus::ALL.iter().all(|n| !s.can_become(*n)), "{s:?}");
            }
        }
        assert!(JobStatus::Queued.can_become(JobStatus::Cancelled));
        assert!(!JobStatus::Succeeded.can_become(JobStatus::Cancelled));
    }
}
