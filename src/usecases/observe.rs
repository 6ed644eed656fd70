//! What operators watch: one reading, taken at scrape time, of the
//! database's truth (jobs, attempts and spend by model, holds, parked work,
//! the review queue, webhooks, today's breaker) and of this node's own
//! counters (claim conflicts, commits by purpose, retention). The API turns
//! a reading into the Prometheus text format; nothing here knows that
//! format, and nothing there reads the store.

use super::spend::SpendDay;
use super::{Result, Tollgate};
use crate::model::{ParkedStage, ParkedState};
use crate::store::{MetricsSnapshot, ParkedCount, Purpose, WebhookStats};
use chrono::{DateTime, Utc};

/// One scrape's reading. The first part must be read (without it there is
/// nothing to report); each later part is `None` when its read failed, so
/// that one slow or broken query leaves the rest of the scrape standing.
pub struct Reading {
    pub at: DateTime<Utc>,
    pub work: MetricsSnapshot,
    pub parked: Option<Vec<ParkedCount>>,
    /// Seconds from parking to a decision over the last day, sorted.
    pub review_latencies: Option<Vec<f64>>,
    pub recoveries: Option<Recoveries>,
    pub webhooks: Option<WebhookStats>,
    /// Today's breaker, as the spend report has it.
    pub today: Option<SpendDay>,
    /// This node's runs that found their claim taken.
    pub claim_conflicts: u64,
    /// This node's commits and their statements, by purpose.
    pub commits: Vec<(Purpose, u64, u64)>,
    /// What retention purged on this node, by kind.
    pub purged: [(&'static str, u64); 5],
}

/// Recoveries claimed more than once, and deliveries that failed again
/// after a reviewer's `retry_delivery`.
pub struct Recoveries {
    pub reclaimed: i64,
    pub delivery_failed_again: i64,
}

impl Reading {
    /// Submissions that may have been paid, with no answer and no decision.
    pub fn unresolved_submissions(&self) -> Option<i64> {
        let counts = self.parked.as_ref()?;
        Some(
            (counts.iter())
                .filter(|c| {
                    c.stage == ParkedStage::SubmissionUncertain && c.state == ParkedState::Open
                })
                .map(|c| c.count)
                .sum(),
        )
    }
}

impl Tollgate {
    /// A reading for a metrics scrape; an error only when the database does
    /// not answer at all.
    pub async fn reading(&self) -> Result<Reading> {
        let at = Utc::now();
        let work = self.store().metrics_snapshot().await?;
        let store = self.store();
        let latencies = store.decision_latencies(at - chrono::Duration::days(1));
        let (parked, latencies, recoveries, webhooks, today) = tokio::join!(
            store.parked_counts(),
            latencies,
            store.recovery_stats(),
            store.webhook_stats(),
            self.spend(at.date_naive(), at.date_naive()),
        );
        Ok(Reading {
            at,
            work,
            parked: parked.ok(),
            review_latencies: latencies.ok().map(|mut l| {
                l.sort_by(f64::total_cmp);
                l
            }),
            recoveries: recoveries.ok().map(|(reclaimed, failed)| Recoveries {
                reclaimed,
                delivery_failed_again: failed,
            }),
            webhooks: webhooks.ok(),
            today: today.ok().and_then(|r| r.days.into_iter().next()),
            claim_conflicts: self.claim_conflicts(),
            commits: store.counters(),
            purged: self.purge_counters().snapshot(),
        })
    }
}
