//! The door every paid job comes through (rules 1, 2, 3 and 9): idempotent
//! submission bound to a key and the body's hash, the charge in the same
//! transaction, cancel, and the one refund. A new job is handed to
//! execution by id only (a doorbell); nothing runs jobs yet.

use crate::model::{
    parse_request, quote, ApiTokenId, Happening, JobId, JobKind, JobRequest, JobStatus,
    LineageState, Quote, Role, UserId,
};
use crate::store::{
    Attempt, Decision, Job, JobCursor, JobEvent, JobFilter, NewJob, Parked, Seek, StoreError,
    Submitted, User,
};
use crate::usecases::cursor::{self, Page};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::{Duration, Utc};
use std::collections::HashMap;

/// How long an idempotency key is kept: a replay within this window returns
/// the first job; after it the key is freed (see `expire_idempotency_keys`).
pub const IDEMPOTENCY_KEY_DAYS: i64 = 7;
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;
pub const JOBS_PAGE_MAX: i64 = 100;

/// Whose jobs a list shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Whose {
    /// The viewer's own.
    #[default]
    Own,
    /// Every user's: admins only.
    Everyone,
    /// One user's: admins only (the Jobs page's filter by person).
    Of(UserId),
}

impl Whose {
    /// The store's filter for `viewer`; `None` when only an admin may ask.
    fn user_id(self, viewer: &User) -> Option<Option<UserId>> {
        match self {
            Whose::Own => Some(Some(viewer.id)),
            _ if !viewer.role.allows(Role::Admin) => None,
            Whose::Everyone => Some(None),
            Whose::Of(u) => Some(Some(u)),
        }
    }
}

/// A list of jobs as asked for, parsed once at the edge.
#[derive(Clone, Copy, Debug)]
pub struct JobQuery {
    pub status: Option<JobStatus>,
    pub limit: i64,
    pub seek: Option<Seek<JobCursor>>,
    pub whose: Whose,
    /// Also count where the page sits ("51–100 of 116"): two more reads,
    /// which pages want and API clients do not pay for.
    pub counted: bool,
    /// One row per lineage: first edits and videos, not repairs (which a
    /// page reads through their lineage). The API lists every job.
    pub lineages_as_one: bool,
}

impl JobQuery {
    /// From the query string's text: `status`, `limit` (20 when absent),
    /// `cursor`.
    pub fn parse(status: Option<&str>, limit: Option<i64>, cursor: Option<&str>) -> Result<Self> {
        let status = match status {
            None => None,
            Some(s) => Some(JobStatus::parse(s).ok_or_else(|| {
                Error::invalid(
                    "status",
                    "must be queued, running, parked, succeeded, failed or cancelled",
                )
            })?),
        };
        let limit = limit.unwrap_or(20);
        if !(1..=JOBS_PAGE_MAX).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1 to {JOBS_PAGE_MAX}"),
            ));
        }
        Ok(JobQuery {
            status,
            limit,
            seek: cursor::decode_opt(cursor)?,
            whose: Whose::Own,
            counted: false,
            lineages_as_one: false,
        })
    }
}

/// A job with everything its object and its page show besides the job:
/// every attempt, oldest first, and an image edit's lineage.
#[derive(Clone, Debug)]
pub struct JobView {
    pub job: Job,
    pub attempts: Vec<Attempt>,
    /// `None` for a video.
    pub lineage: Option<LineageState>,
}

/// A job as its page shows it: the view the API answers with, the
/// timeline as the viewer may read it, and its newest parked record with
/// that record's latest decision.
#[derive(Clone, Debug)]
pub struct JobDetail {
    pub view: JobView,
    pub events: Vec<JobEvent>,
    pub parked: Option<(Parked, Option<Decision>)>,
}

/// The timeline in order. Reviewers and admins read all of it; the job's
/// owner reads that a decision was made and what it was, not the
/// reviewers' names, notes or evidence (internal to the studio).
fn timeline_for(viewer: &User, events: Vec<JobEvent>) -> Vec<JobEvent> {
    let events = crate::model::in_order_of_happening(events, |e| &e.happening);
    if viewer.role.allows(Role::Reviewer) {
        return events;
    }
    events
        .into_iter()
        .filter(|e| !matches!(e.happening, Happening::Note { .. }))
        .map(|mut e| {
            if let Happening::Decision(d) = &mut e.happening {
                *d = d.for_owner();
            }
            e
        })
        .collect()
}

/// Checks an `Idempotency-Key`: 1 to 255 printable ASCII characters.
pub fn check_idempotency_key(key: Option<&str>) -> Result<&str> {
    let key = key.ok_or(Error::BadRequest {
        status: 400,
        code: "IDEMPOTENCY_KEY_REQUIRED",
        message: "send an Idempotency-Key header (1 to 255 printable ASCII characters) with every paid request".into(),
    })?;
    if key.is_empty()
        || key.len() > IDEMPOTENCY_KEY_LEN_MAX
        || !key.bytes().all(|b| (0x20..0x7f).contains(&b))
    {
        return Err(Error::BadRequest {
            status: 400,
            code: "INVALID_IDEMPOTENCY_KEY",
            message: "Idempotency-Key must be 1 to 255 printable ASCII characters".into(),
        });
    }
    Ok(key)
}

fn invalid(errors: crate::model::FieldErrors) -> Error {
    Error::Invalid {
        message: errors.summary(),
        fields: errors.0,
    }
}

/// What fair use made of a paid request: the job made earlier under its
/// key (rule 1 answers before any limit), or leave to go on while the
/// admission lives.
pub(crate) enum Admitted<'a> {
    Replay(Box<Submission>),
    Go(crate::usecases::limits::Admission<'a>),
}

/// Whether a submission made a job or found the one made under its key.
#[derive(Debug)]
pub struct Submission {
    pub job: Job,
    pub created: bool,
}

impl Tollgate {
    /// Validates a request body and prices it, charging nothing.
    pub fn price(&self, body: &serde_json::Value) -> Result<(JobRequest, Quote)> {
        let request = parse_request(body, self.catalogue()).map_err(invalid)?;
        let q = quote(self.catalogue(), &request);
        Ok((request, q))
    }

    /// Rule 1: one key and one body make one job. Same key and same body
    /// return the first job; same key and another body is a conflict; a
    /// balance that cannot pay makes no job at all. `token` is the API token
    /// it was ordered with (what its spend is counted under), `None` from
    /// the pages.
    pub async fn submit_job(
        &self,
        user: &User,
        token: Option<ApiTokenId>,
        key: Option<&str>,
        body: &serde_json::Value,
    ) -> Result<Submission> {
        let key = check_idempotency_key(key)?;
        let (request, q) = self.price(body)?;
        if let Some(missing) = self.owns_assets(user.id, &request.assets()).await? {
            let field = match &request {
                crate::model::JobRequest::ImageEdit(e) if e.target.mask == Some(missing) => {
                    "target.mask"
                }
                _ => "source",
            };
            return Err(Error::invalid(
                field,
                format!("no asset {missing} of yours; upload it with POST /v1/assets"),
            ));
        }
        // Rule 13: a job's own webhook URL must not lead into our network
        // (checked again at every send).
        if let Some(url) = request.webhook_url() {
            self.check_webhook_url("webhook_url", url).await?;
        }
        let hash = request.canonical_hash();
        let _admission = match self.admit_paid(user, key, &hash).await? {
            Admitted::Replay(replayed) => return Ok(*replayed),
            Admitted::Go(admission) => admission,
        };
        let new = NewJob {
            id: JobId::new(),
            user_id: user.id,
            request,
            request_sha256: hash.clone(),
            idempotency_key: key.to_string(),
            credits: q.credits,
            estimated_usd: q.estimated_usd,
            created_at: Utc::now(),
            token_id: token,
        };
        match self.store().submit_job(&new).await {
            Ok(Submitted::Created(job)) => {
                self.ring(job.id);
                Ok(Submission { job, created: true })
            }
            Ok(Submitted::Existing(job)) if job.request_sha256 == hash => Ok(Submission { job, created: false }),
            Ok(Submitted::Existing(_)) => Err(Error::Conflict {
                code: "IDEMPOTENCY_CONFLICT",
                message: "this Idempotency-Key was used with a different request; use a new key for a new job".into(),
            }),
            Err(StoreError::InsufficientCredits) => Err(Error::InsufficientCredits),
            Err(e) => Err(e.into()),
        }
    }

    /// Fair use (issue 29) before a paid request is charged: one token from
    /// the person's bucket, or 429. Rule 1 comes first: a replay of a job
    /// already made under `key` costs nothing, so it is answered (or found
    /// in conflict) even when the bucket is empty.
    pub(crate) async fn admit_paid(
        &self,
        user: &User,
        key: &str,
        hash: &str,
    ) -> Result<Admitted<'_>> {
        let limited = match self.paid_limits().admit(user.id, key) {
            Ok(admission) => match self.within_share(user).await {
                Ok(()) => return Ok(Admitted::Go(admission)),
                Err(over) => over,
            },
            Err(limited) => limited,
        };
        match self.store().job_by_idempotency_key(user.id, key).await? {
            Some(job) if job.request_sha256 == hash => Ok(Admitted::Replay(Box::new(Submission {
                job,
                created: false,
            }))),
            Some(_) => Err(Error::Conflict {
                code: "IDEMPOTENCY_CONFLICT",
                message: "this Idempotency-Key was used with a different request; use a new key for a new job".into(),
            }),
            None => Err(limited),
        }
    }

    /// Fair use of the day's cap (issue 29, 2): once one person's work has
    /// cost `TOLLGATE_USER_SHARE_PERCENT` of today's cap (refunded work
    /// included: the provider was paid), their new paid requests are 429
    /// until the UTC day ends, and everyone else's work goes on.
    async fn within_share(&self, user: &User) -> Result<()> {
        let percent = self.config().user_share_percent;
        if percent >= 100 {
            return Ok(());
        }
        let now = Utc::now();
        let today = now.date_naive();
        let cap = self.budget(today).await?.cap_usd;
        let share = cap.times(rust_decimal::Decimal::new(i64::from(percent), 2));
        // A job spends on the day its attempt holds budget: work made in
        // the last week covers every attempt that could count today.
        let since = now - chrono::Duration::days(7);
        let spent = self.store().user_spend_on(user.id, today, since).await?;
        if spent.decimal() < share.decimal() {
            return Ok(());
        }
        let midnight = today
            .succ_opt()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc());
        let wait = midnight.map_or(3600, |m| (m - now).num_seconds().max(1));
        Err(Error::ShareUsed {
            retry_after_s: u64::try_from(wait).unwrap_or(3600),
        })
    }

    /// A doorbell: tells execution that a job is waiting. It carries only
    /// the id; the database is the truth (rule 4).
    fn ring(&self, job: JobId) {
        tracing::debug!(%job, "job queued");
        self.doorbell().notify_one();
    }

    /// A job its owner, a reviewer or an admin may see; 404 for anyone else.
    pub async fn visible_job(&self, viewer: &User, id: JobId) -> Result<Job> {
        let job = self.store().job(id).await?.ok_or(Error::NotFound("job"))?;
        if job.user_id == viewer.id || viewer.role.allows(Role::Reviewer) {
            Ok(job)
        } else {
            Err(Error::NotFound("job"))
        }
    }

    /// The viewer's jobs (every job, for an admin asking for everyone's),
    /// newest first, a page at a time.
    pub async fn list_jobs(&self, viewer: &User, q: &JobQuery) -> Result<Page<Job>> {
        let user_id = q.whose.user_id(viewer).ok_or(Error::Forbidden)?;
        let filter = JobFilter {
            user_id,
            status: q.status,
            seek: q.seek,
            limit: q.limit + 1,
            roots_only: q.lineages_as_one,
        };
        let jobs = self.store().list_jobs(&filter).await?;
        let at = |j: &Job| JobCursor {
            created_at: j.created_at,
            id: j.id,
        };
        let mut page = Page::of(jobs, q.limit as usize, q.seek, at);
        if q.counted {
            let count = |seek| {
                let f = JobFilter {
                    seek,
                    ..filter.clone()
                };
                async move { self.store().count_jobs(&f).await }
            };
            page.place = Some(cursor::place_of(&page, at, count).await?);
        }
        Ok(page)
    }

    /// How many jobs there are in each status, of `whose` (the Jobs page's
    /// tabs); a status with none is left out.
    pub async fn job_counts(&self, viewer: &User, whose: Whose) -> Result<Vec<(JobStatus, u64)>> {
        let user_id = whose.user_id(viewer).ok_or(Error::Forbidden)?;
        Ok(self.store().count_jobs_by_status(user_id).await?)
    }

    /// Every job ordered under an idempotency key, whoever ordered it (an
    /// admin's search): keys are each person's own, so one key may name
    /// several people's jobs.
    pub async fn jobs_under_key(&self, viewer: &User, key: &str) -> Result<Vec<Job>> {
        if !viewer.role.allows(Role::Admin) {
            return Err(Error::Forbidden);
        }
        Ok(self.store().jobs_under_key(key).await?)
    }

    /// Jobs with what their objects show: the attempts of each and, for
    /// an image edit, its lineage; two reads for any number of jobs.
    pub async fn job_views(&self, jobs: Vec<Job>) -> Result<Vec<JobView>> {
        let ids: Vec<_> = jobs.iter().map(|j| j.id).collect();
        let mut attempts: HashMap<JobId, Vec<Attempt>> = HashMap::new();
        for a in self.store().attempts_of(&ids).await? {
            attempts.entry(a.job_id).or_default().push(a);
        }
        let roots: Vec<_> = jobs
            .iter()
            .filter(|j| j.kind == JobKind::ImageEdit)
            .map(|j| j.root())
            .collect();
        let lineages: HashMap<_, _> = self
            .store()
            .lineages_of(&roots)
            .await?
            .into_iter()
            .map(|l| (l.root, l))
            .collect();
        Ok(jobs
            .into_iter()
            .map(|job| {
                let lineage = (job.kind == JobKind::ImageEdit).then(|| {
                    lineages
                        .get(&job.root())
                        .cloned()
                        .unwrap_or_else(|| LineageState::fresh(job.root()))
                });
                JobView {
                    attempts: attempts.remove(&job.id).unwrap_or_default(),
                    lineage,
                    job,
                }
            })
            .collect())
    }

    /// One job's view, for someone who may see it.
    pub async fn job_view(&self, viewer: &User, id: JobId) -> Result<JobView> {
        let job = self.visible_job(viewer, id).await?;
        self.view_of(job).await
    }

    /// A job's view when the caller already holds the job.
    pub async fn view_of(&self, job: Job) -> Result<JobView> {
        let attempts = self.store().attempts(job.id).await?;
        let lineage = self.lineage_state(&job).await?;
        Ok(JobView {
            job,
            attempts,
            lineage,
        })
    }

    /// A submission's view: a job made just now has no attempts to read.
    pub async fn submission_view(&self, s: Submission) -> Result<JobView> {
        if !s.created {
            return self.view_of(s.job).await;
        }
        let lineage = self.lineage_state(&s.job).await?;
        Ok(JobView {
            job: s.job,
            attempts: Vec::new(),
            lineage,
        })
    }

    /// Rule 9: cancels a job that is not terminal (and refunds it, once).
    /// Returns the job as stored either way.
    pub async fn cancel_job(&self, viewer: &User, id: JobId) -> Result<Job> {
        let job = self.visible_job(viewer, id).await?;
        if job.user_id != viewer.id && !viewer.role.allows(Role::Admin) {
            return Err(Error::NotFound("job"));
        }
        match self.store().cancel_job(id, Utc::now()).await? {
            Some(cancelled) => Ok(cancelled),
            None => Ok(self.store().job(id).await?.ok_or(Error::NotFound("job"))?),
        }
    }

    /// A succeeded job's output, to those who may see the job.
    pub async fn job_output_content(
        &self,
        viewer: &User,
        id: JobId,
    ) -> Result<(String, crate::storage::ObjectBody)> {
        let job = self.visible_job(viewer, id).await?;
        let (key, content_type) = self
            .store()
            .job_output(job.id)
            .await?
            .ok_or(Error::NotFound("output"))?;
        let key =
            crate::storage::ObjectKey::parse(&key).map_err(|e| Error::Internal(e.to_string()))?;
        let body = self
            .objects()
            .get(&key)
            .await
            .map_err(|e| Error::Internal(format!("reading an output: {e}")))?
            .ok_or(Error::NotFound("output"))?;
        Ok((content_type, body))
    }

    /// Rule 3: the one refund every caller uses. Refunds a failed or
    /// cancelled job once; any other call does nothing.
    pub async fn refund(&self, id: JobId) -> Result<bool> {
        Ok(self.store().refund_job(id, Utc::now()).await?)
    }

    /// A job's attempts, oldest first, for someone who may see the job.
    pub async fn job_attempts(&self, viewer: &User, id: JobId) -> Result<Vec<Attempt>> {
        self.visible_job(viewer, id).await?;
        Ok(self.store().attempts(id).await?)
    }

    /// The timeline, as `viewer` may read it (see `timeline_for`).
    pub async fn job_events(&self, viewer: &User, id: JobId) -> Result<Vec<JobEvent>> {
        self.visible_job(viewer, id).await?;
        Ok(timeline_for(viewer, self.store().job_events(id).await?))
    }

    /// Everything a job's page shows, for someone who may see the job: its
    /// view is the one `GET /v1/jobs/{id}` answers with.
    pub async fn job_detail(&self, viewer: &User, id: JobId) -> Result<JobDetail> {
        let job = self.visible_job(viewer, id).await?;
        let (view, events, records) = tokio::try_join!(
            self.view_of(job),
            async { Ok(self.store().job_events(id).await?) },
            self.parked_of_job(id),
        )?;
        // The newest record: waiting, being recovered, or what was decided.
        let parked = match records.into_iter().next() {
            Some(p) => {
                let decision = self.store().decisions(p.id).await?.pop();
                Some((p, decision))
            }
            None => None,
        };
        Ok(JobDetail {
            view,
            events: timeline_for(viewer, events),
            parked,
        })
    }

    /// Frees keys older than the retention window; run by the sweeper.
    pub async fn expire_idempotency_keys(&self) -> Result<u64> {
        let before = Utc::now() - Duration::days(IDEMPOTENCY_KEY_DAYS);
        Ok(self.store().expire_idempotency_keys(before).await?)
    }
}
