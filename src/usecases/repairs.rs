//! Repairs (rule 14), as a person asks for them: a new instruction on a
//! succeeded edit, the settings frozen, charged like its parent (and the
//! charge given back at once, the first time, when the version's review
//! found issues) and refunded if it fails, at most two per lineage, made on the version the
//! person has now; and the lineage they can follow.

use crate::model::{parse_repair, quote, ApiTokenId, JobId, JobKind, JobStatus, LineageState};
use crate::store::{Job, NewJob, NewRepair, StoreError, Submitted, User};
use crate::usecases::error::{Error, Result};
use crate::usecases::jobs::{check_idempotency_key, Admitted, Submission};
use crate::Tollgate;
use chrono::Utc;
use sha2::{Digest, Sha256};

impl Tollgate {
    /// Submits a repair of the lineage `of` belongs to. Replays under the
    /// same key return the first repair, even once the lineage is full.
    pub async fn submit_repair(
        &self,
        user: &User,
        token: Option<ApiTokenId>,
        of: JobId,
        key: Option<&str>,
        body: &serde_json::Value,
    ) -> Result<Submission> {
        let key = check_idempotency_key(key)?;
        let job = self.visible_job(user, of).await?;
        if job.user_id != user.id {
            // Reviewers and admins see the job, but a repair is charged to
            // its owner: only they ask for one. To anyone else it is not
            // a job of theirs (as cancelling is to a reviewer).
            return Err(Error::NotFound("job"));
        }
        let instruction = parse_repair(body).map_err(|e| Error::Invalid {
            message: e.summary(),
            fields: e.0,
        })?;
        repairable(&job)?;
        // The key is bound to the job named and the instruction.
        let hash = hex::encode(Sha256::digest(
            serde_json::json!({"repair_of": of, "instruction": instruction})
                .to_string()
                .as_bytes(),
        ));
        let _admission = match self.admit_paid(user, key, &hash).await? {
            Admitted::Replay(replayed) => return Ok(*replayed),
            Admitted::Go(admission) => admission,
        };
        // Charged like its parent: the same request priced the same way.
        let q = quote(self.catalogue(), &job.request);
        let new = NewRepair {
            job: NewJob {
                id: JobId::new(),
                user_id: user.id,
                request: job.request.clone(),
                request_sha256: hash.clone(),
                idempotency_key: key.to_string(),
                credits: q.credits,
                estimated_usd: q.estimated_usd,
                created_at: Utc::now(),
                token_id: token,
            },
            root: job.root(),
            instruction,
        };
        let submitted = self.store().submit_repair(&new).await;
        if let Ok(Submitted::Created(_)) = submitted {
            self.doorbell().notify_one();
        }
        repair_submission(submitted, &hash)
    }

    /// The person makes one version of their edit that was theirs once
    /// (the first edit, or a repair delivered as better) the one they
    /// have again (issue 33, 6): what My edits shows, and what the next repair
    /// is made on and compared with. Refused while a repair is under way
    /// (it is being compared with the version it was made on).
    pub async fn choose_version(&self, user: &User, version: JobId) -> Result<LineageState> {
        let job = self.visible_job(user, version).await?;
        if job.user_id != user.id {
            // As with a repair: only the person who ordered it chooses.
            return Err(Error::NotFound("job"));
        }
        if !job.was_delivered() {
            return Err(Error::Conflict {
                code: "NOT_CHOOSABLE",
                message:
                    "only a finished first edit, or a repair that was delivered, can be chosen"
                        .into(),
            });
        }
        let root = job.root();
        if !self
            .store()
            .choose_version(root, job.id, Utc::now())
            .await?
        {
            return Err(Error::Conflict {
                code: "REPAIR_UNDER_WAY",
                message: "a repair of this edit is under way; choose once it has finished".into(),
            });
        }
        tracing::info!(job = %job.id, lineage = %root, "a version was chosen");
        Ok(self
            .store()
            .lineage(root)
            .await?
            .unwrap_or_else(|| LineageState::fresh(root)))
    }

    /// The shared state of an image edit's lineage (a fresh one before its
    /// first repair); `None` for a video, which has no lineage.
    pub async fn lineage_state(&self, job: &Job) -> Result<Option<LineageState>> {
        if job.kind != JobKind::ImageEdit {
            return Ok(None);
        }
        let root = job.root();
        Ok(Some(
            self.store()
                .lineage(root)
                .await?
                .unwrap_or_else(|| LineageState::fresh(root)),
        ))
    }

    /// Every version of the lineage `id` belongs to, the original first,
    /// and the lineage's state.
    pub async fn lineage(&self, viewer: &User, id: JobId) -> Result<(LineageState, Vec<Job>)> {
        let job = self.visible_job(viewer, id).await?;
        let state = self
            .lineage_state(&job)
            .await?
            .ok_or_else(|| Error::invalid("job", "a video has no lineage"))?;
        let versions = self.lineage_versions(&state).await?;
        Ok((state, versions))
    }

    /// Whether the lineage's next repair would be on the studio: its
    /// delivered version's review found issues and no free repair of it
    /// is live (`model::repair_is_free`, judged again when it is asked for).
    pub async fn next_repair_is_free(&self, state: &LineageState) -> Result<bool> {
        Ok(self.store().repair_is_free(state.delivered).await?)
    }

    /// Every version of a lineage, the first edit first. The caller has
    /// already seen one of its jobs (`visible_job`).
    pub async fn lineage_versions(&self, state: &LineageState) -> Result<Vec<Job>> {
        Ok(self.store().lineage_versions(state.root).await?)
    }
}

/// Only a succeeded image edit whose photos are still kept is repaired.
fn repairable(job: &Job) -> Result<()> {
    if job.kind != JobKind::ImageEdit {
        return Err(Error::invalid("job", "only image edits can be repaired"));
    }
    if job.status != JobStatus::Succeeded {
        return Err(Error::invalid(
            "job",
            format!(
                "only an edit that succeeded can be repaired; this one is {}",
                job.status.as_str()
            ),
        ));
    }
    if job.media_purged_at.is_some() {
        return Err(Error::invalid(
            "job",
            "this edit's photos were removed under the studio's retention policy, so it cannot be repaired; order a new edit",
        ));
    }
    Ok(())
}

/// The store's answer as the person's: a new repair, the first one again
/// under the same key and request, or a key reused for another request.
fn repair_submission(
    submitted: std::result::Result<Submitted, StoreError>,
    hash: &str,
) -> Result<Submission> {
    match submitted {
        Ok(Submitted::Created(job)) => Ok(Submission { job, created: true }),
        Ok(Submitted::Existing(job)) if job.request_sha256 == hash => Ok(Submission {
            job,
            created: false,
        }),
        Ok(Submitted::Existing(_)) => Err(Error::Conflict {
            code: "IDEMPOTENCY_CONFLICT",
            message: "this Idempotency-Key was used with a different request; use a new key for a new repair".into(),
        }),
        Err(StoreError::InsufficientCredits) => Err(Error::InsufficientCredits),
        Err(e) => Err(e.into()),
    }
}
