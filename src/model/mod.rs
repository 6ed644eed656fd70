//! The pure domain: ids, roles, credits, ledger kinds and the parsing of
//! everything a person types. No I/O here; this module compiles to wasm so a
//! page can validate with the very functions the server uses.

mod attempt;
mod catalogue;
mod credits;
mod email;
mod event;
mod evidence;
mod failure;
mod ids;
mod job;
mod ledger;
mod lineage;
mod media;
mod money;
mod parked;
mod password;
mod progress;
mod role;
pub mod scrub;
mod webhook;

pub use attempt::{AttemptEnd, AttemptState, CostSource, ErrorClass, Purpose};
#[cfg(feature = "server")]
pub use catalogue::StyleId;
pub use catalogue::{
    style, Catalogue, EditModel, Resolution, Strength, Style, TargetKind, VideoModel, VideoPrice,
    STYLES,
};
pub use credits::{Credits, CreditsError, GRANT_MAX};
pub use email::{Email, EmailError};
pub use event::{in_order_of_happening, DecisionNote, GeneratedNote, Happening, StepDone};
pub use evidence::{ParkedEvidence, SentAttempt};
pub use failure::{FailureCode, JobFailure, ProviderSaid, QUESTIONS_MAX};
pub use ids::{
    ApiTokenId, AssetId, AttemptId, DecisionId, DeliveryId, JobId, LedgerEntryId, ParkedId, UserId,
    WebhookEndpointId,
};
pub use job::{
    parse_request, quote, FieldErrors, ImageEdit, JobKind, JobRequest, JobStatus, Quote,
    RawImageEdit, RawTarget, RawVideo, Target, Video,
};
pub use ledger::{job_of_reference, LedgerKind, UnknownLedgerKind};
pub use lineage::{
    direction, parse_repair, repair_is_free, CompareOutcome, Comparison, Direction, LineageEffect,
    LineageState, RepairRefusal, INSTRUCTION_LEN_MAX, REPAIRS_MAX,
};
pub use media::{served_content_type, sniff_output};
pub use money::{Usd, UsdError, USD_SCALE};
pub use parked::{
    is_plain_provider_job_id, ParkedStage, ParkedState, RecoveryState, ReviewAction,
    PROVIDER_JOB_ID_LEN_MAX,
};
pub use password::{Password, PasswordError, PASSWORD_LEN_MAX, PASSWORD_LEN_MIN};
pub use progress::{Progress, Readiness, Review, Step, StoredOutput, Verdict};
pub use role::{Role, UnknownRole};
pub use webhook::{DeliveryState, WebhookEvent};
