//! What can be ordered and what it costs: edit targets, the fifteen handmade
//! media, strengths, and the video models with their rate cards. `quote`
//! (in `job`) prices a request from a `Catalogue`; the page and the charge
//! use the same one.

use super::money::Usd;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What part of the photo to change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Pet,
    Person,
    Background,
    /// A region the person brushed: needs a mask.
    Area,
}

impl TargetKind {
    pub const ALL: [TargetKind; 4] = [
        TargetKind::Pet,
        TargetKind::Person,
        TargetKind::Background,
        TargetKind::Area,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Pet => "pet",
            TargetKind::Person => "person",
            TargetKind::Background => "background",
            TargetKind::Area => "area",
        }
    }

    pub fn parse(s: &str) -> Option<TargetKind> {
        TargetKind::ALL.into_iter().find(|t| t.as_str() == s)
    }

    pub fn label(self) -> &'static str {
        match self {
            TargetKind::Pet => "A pet",
            TargetKind::Person => "A person",
            TargetKind::Background => "The background",
            TargetKind::Area => "An area I paint",
        }
    }
}

/// How far the medium takes over the selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Strength {
    Subtle,
    Balanced,
    Strong,
}

impl Strength {
    pub const ALL: [Strength; 3] = [Strength::Subtle, Strength::Balanced, Strength::Strong];

    pub fn as_str(self) -> &'static str {
        match self {
            Strength::Subtle => "subtle",
            Strength::Balanced => "balanced",
            Strength::Strong => "strong",
        }
    }

    pub fn parse(s: &str) -> Option<Strength> {
        Strength::ALL.into_iter().find(|t| t.as_str() == s)
    }

    pub fn label(self) -> &'static str {
        match self {
            Strength::Subtle => "Subtle",
            Strength::Balanced => "Balanced",
            Strength::Strong => "Strong",
        }
    }

    /// A strong edit runs more steps, so it is estimated to cost more.
    pub fn price_factor(self) -> Decimal {
        match self {
            Strength::Subtle | Strength::Balanced => Decimal::ONE,
            Strength::Strong => Decimal::new(15, 1),
        }
    }
}

/// One handmade medium: id, name, a line of description and a swatch of
/// three colours the gallery paints as a small texture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Style {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub swatch: [&'static str; 3],
}

pub const STYLES: [Style; 15] = [
    Style {
        id: "embroidery",
        name: "Embroidery",
        description: "Satin stitches in glossy thread on linen.",
        swatch: ["#b23a48", "#f4e9d8", "#2d6a4f"],
    },
    Style {
        id: "needle_felt",
        name: "Needle felt",
        description: "Soft, fuzzy wool sculpted with a barbed needle.",
        swatch: ["#c9a66b", "#efe3d0", "#7d5a50"],
    },
    Style {
        id: "origami",
        name: "Origami",
        description: "Crisp folded paper with sharp creases and facets.",
        swatch: ["#e76f51", "#f4f1de", "#264653"],
    },
    Style {
        id: "cross_stitch",
        name: "Cross-stitch",
        description: "Tiny X stitches on a counted Aida grid.",
        swatch: ["#d62828", "#fdf0d5", "#003049"],
    },
    Style {
        id: "watercolour",
        name: "Watercolour",
        description: "Loose washes that bloom and pool on cold-press paper.",
        swatch: ["#8ecae6", "#ffffff", "#ffb4a2"],
    },
    Style {
        id: "linocut",
        name: "Linocut",
        description: "Bold carved lines printed in one ink.",
        swatch: ["#1b1b1e", "#f5f3ee", "#c1121f"],
    },
    Style {
        id: "paper_collage",
        name: "Paper collage",
        description: "Torn and cut papers layered into shapes.",
        swatch: ["#f4a261", "#e9c46a", "#2a9d8f"],
    },
    Style {
        id: "crochet",
        name: "Crochet",
        description: "Chunky hooked loops of cotton yarn.",
        swatch: ["#ffafcc", "#cdb4db", "#a2d2ff"],
    },
    Style {
        id: "stained_glass",
        name: "Stained glass",
        description: "Jewel-toned glass held in dark lead lines.",
        swatch: ["#3a0ca3", "#f72585", "#4cc9f0"],
    },
    Style {
        id: "mosaic",
        name: "Mosaic",
        description: "Small tiles of stone and glass set in grout.",
        swatch: ["#6d597a", "#e56b6f", "#eaac8b"],
    },
    Style {
        id: "clay",
        name: "Clay",
        description: "Hand-shaped modelling clay with thumbprints.",
        swatch: ["#bc6c25", "#dda15e", "#606c38"],
    },
    Style {
        id: "quilt",
        name: "Quilt",
        description: "Patchwork fabric pieces joined by running stitches.",
        swatch: ["#9b2226", "#e9d8a6", "#0a9396"],
    },
    Style {
        id: "pencil_sketch",
        name: "Pencil sketch",
        description: "Graphite hatching on textured paper.",
        swatch: ["#343a40", "#f8f9fa", "#adb5bd"],
    },
    Style {
        id: "woodcut",
        name: "Woodcut",
        description: "Gouged wood grain printed in warm ink.",
        swatch: ["#582f0e", "#ede0d4", "#7f4f24"],
    },
    Style {
        id: "knitted_wool",
        name: "Knitted wool",
        description: "Stockinette stitches in cosy, chunky wool.",
        swatch: ["#588157", "#dad7cd", "#a3b18a"],
    },
];

pub fn style(id: &str) -> Option<&'static Style> {
    STYLES.iter().find(|s| s.id == id)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub enum Resolution {
    #[serde(rename = "720p")]
    P720,
    #[serde(rename = "1080p")]
    P1080,
}

impl Resolution {
    pub const ALL: [Resolution; 2] = [Resolution::P720, Resolution::P1080];

    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::P720 => "720p",
            Resolution::P1080 => "1080p",
        }
    }

    pub fn parse(s: &str) -> Option<Resolution> {
        Resolution::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// A video model's rate card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum VideoPrice {
    /// Per second of billable duration, by resolution.
    PerSecond(BTreeMap<Resolution, Usd>),
    /// Per clip, by resolution.
    PerGeneration(BTreeMap<Resolution, Usd>),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct VideoModel {
    pub id: String,
    pub name: String,
    /// Durations (seconds) the model accepts.
    pub durations_s: Vec<u32>,
    pub price: VideoPrice,
}

impl VideoModel {
    pub fn resolutions(&self) -> Vec<Resolution> {
        match &self.price {
            VideoPrice::PerSecond(m) | VideoPrice::PerGeneration(m) => m.keys().copied().collect(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct EditModel {
    pub id: String,
    pub name: String,
    /// Estimated provider cost of one edit at balanced strength.
    pub per_generation: Usd,
}

/// Everything `quote` needs. Built in by default; the server may build it
/// from its configuration and hands the same value to the pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalogue {
    /// What one credit is worth: credits = ceil(estimate / credit_usd).
    pub credit_usd: Usd,
    pub edit_model: EditModel,
    pub video_models: Vec<VideoModel>,
    pub default_video_model: String,
}

impl Catalogue {
    /// The local models every fresh install has.
    pub fn builtin() -> Catalogue {
        let usd = |s: &str| Usd::parse(s).unwrap_or(Usd::ZERO);
        Catalogue {
            credit_usd: usd("0.02"),
            edit_model: EditModel {
                id: "local-edit".into(),
                name: "Local edit".into(),
                per_generation: usd("0.04"),
            },
            video_models: vec![
                VideoModel {
                    id: "local-clip".into(),
                    name: "Local clip".into(),
                    durations_s: vec![2, 3, 5],
                    price: VideoPrice::PerSecond(BTreeMap::from([
                        (Resolution::P720, usd("0.02")),
                        (Resolution::P1080, usd("0.035")),
                    ])),
                },
                VideoModel {
                    id: "local-reel".into(),
                    name: "Local reel".into(),
                    durations_s: vec![4, 6, 8],
                    price: VideoPrice::PerGeneration(BTreeMap::from([
                        (Resolution::P720, usd("0.10")),
                        (Resolution::P1080, usd("0.16")),
                    ])),
                },
            ],
            default_video_model: "local-clip".into(),
        }
    }

    pub fn video_model(&self, id: &str) -> Option<&VideoModel> {
        self.video_models.iter().find(|m| m.id == id)
    }
}

/// The id of one of the fifteen media, as the OpenAPI document describes
/// it: an enum built from `STYLES`, so the document cannot drift from them.
#[cfg(feature = "server")]
pub struct StyleId;

#[cfg(feature = "server")]
impl utoipa::PartialSchema for StyleId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(STYLES.iter().map(|s| s.id)))
            .description(Some("One of the fifteen media of GET /v1/catalogue."))
            .into()
    }
}

#[cfg(feature = "server")]
impl utoipa::ToSchema for StyleId {}
