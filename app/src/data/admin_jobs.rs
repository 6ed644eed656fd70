//! The admin Jobs page's data (issue 33, 10): a page of everyone's jobs
//! (or one person's), how many are in each status, what each really cost
//! beside its estimate, why the failed ones failed, and a search by job id
//! or idempotency key.

use super::{JobRow, Paged};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// One row of the admin Jobs page.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AdminJobRow {
    pub job: JobRow,
    pub owner: String,
    /// What its provider calls cost: the priced sum, and how many nobody
    /// could price ("$0.10 + 1 unpriced"); `None` before any call.
    pub cost: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AdminJobs {
    pub page: Paged<AdminJobRow>,
    /// Jobs in each status (its value, its label, how many), for the tabs.
    pub counts: Vec<(String, String, u64)>,
    pub total: u64,
    /// Set when the page shows what a search found instead of a list.
    pub found: Option<String>,
}

/// The filters in the page's address.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct AdminJobsFilter {
    pub status: Option<String>,
    /// A person's email.
    pub user: Option<String>,
    /// A job id or an idempotency key.
    pub find: Option<String>,
    pub cursor: Option<String>,
}

/// The page's data for `filter` (flattened: a server function's arguments
/// travel as a form).
pub async fn all_jobs(filter: AdminJobsFilter) -> Result<AdminJobs, ServerFnError> {
    load_admin_jobs(filter.status, filter.user, filter.find, filter.cursor).await
}

#[server]
pub async fn load_admin_jobs(
    status: Option<String>,
    user: Option<String>,
    find: Option<String>,
    cursor: Option<String>,
) -> Result<AdminJobs, ServerFnError> {
    let filter = AdminJobsFilter {
        status,
        user,
        find,
        cursor,
    };
    use super::ssr::*;
    use tollgate::usecases::jobs::Whose;
    let p = require(tollgate::model::Role::Admin).await?;
    let t = engine()?;
    let whose = match filter.user.as_deref() {
        Some(email) => Whose::Of(t.user_by_email(email).await.map_err(fail)?.id),
        None => Whose::Everyone,
    };
    let (counts, total) = status_counts(&t, &p.user, whose).await.map_err(fail)?;
    let (page, found) = match filter.find.as_deref() {
        Some(find) => {
            let jobs = found(&t, &p.user, find).await.map_err(fail)?;
            let page = Paged {
                rows: rows_of(&t, jobs).await.map_err(fail)?,
                next: None,
                prev: None,
                place: None,
            };
            (page, Some(find.to_string()))
        }
        None => (listed(&t, &p.user, whose, &filter).await?, None),
    };
    Ok(AdminJobs {
        page,
        counts,
        total,
        found,
    })
}

/// The Jobs page's tabs: (status, its words, how many), and all of them.
#[cfg(feature = "ssr")]
async fn status_counts(
    t: &tollgate::Tollgate,
    admin: &tollgate::store::User,
    whose: tollgate::usecases::jobs::Whose,
) -> Result<(Vec<(String, String, u64)>, u64), tollgate::Error> {
    let counts = t.job_counts(admin, whose).await?;
    let total = counts.iter().map(|(_, n)| n).sum();
    let counts = counts
        .into_iter()
        .map(|(s, n)| (s.as_str().to_string(), s.label().to_string(), n))
        .collect();
    Ok((counts, total))
}

/// A page of the jobs the filter's status names, newest first, counted.
#[cfg(feature = "ssr")]
async fn listed(
    t: &tollgate::Tollgate,
    admin: &tollgate::store::User,
    whose: tollgate::usecases::jobs::Whose,
    filter: &AdminJobsFilter,
) -> Result<Paged<AdminJobRow>, ServerFnError> {
    use super::ssr::fail;
    use tollgate::usecases::jobs::JobQuery;
    let mut q = JobQuery::parse(
        filter.status.as_deref(),
        Some(super::ADMIN_JOBS_PAGE),
        filter.cursor.as_deref(),
    )
    .map_err(fail)?;
    q.whose = whose;
    q.counted = true;
    let page = t.list_jobs(admin, &q).await.map_err(fail)?;
    let rows = rows_of(t, page.items).await.map_err(fail)?;
    let page = tollgate::usecases::cursor::Page {
        items: rows,
        next: page.next,
        prev: page.prev,
        place: page.place,
    };
    Ok(super::paged(page, |row| row))
}

#[cfg(feature = "ssr")]
async fn found(
    t: &tollgate::Tollgate,
    admin: &tollgate::store::User,
    find: &str,
) -> Result<Vec<tollgate::store::Job>, tollgate::Error> {
    let find = find.trim();
    match find.parse::<tollgate::model::JobId>() {
        Ok(id) => match t.visible_job(admin, id).await {
            Ok(job) => Ok(vec![job]),
            Err(tollgate::Error::NotFound(_)) => Ok(Vec::new()),
            Err(e) => Err(e),
        },
        Err(_) => t.jobs_under_key(admin, find).await,
    }
}

/// The rows for a page of jobs: owners by email, and each job's cost from
/// its attempts (one read for the page).
#[cfg(feature = "ssr")]
async fn rows_of(
    t: &tollgate::Tollgate,
    jobs: Vec<tollgate::store::Job>,
) -> Result<Vec<AdminJobRow>, tollgate::Error> {
    let owners: std::collections::HashMap<_, _> = t
        .list_users()
        .await?
        .into_iter()
        .map(|u| (u.id, u.email.to_string()))
        .collect();
    let views = t.job_views(jobs).await?;
    Ok(views
        .into_iter()
        .map(|v| {
            let cost = cost_words(&v.attempts);
            AdminJobRow {
                owner: owners.get(&v.job.user_id).cloned().unwrap_or_default(),
                job: super::job_row(v.job),
                cost,
            }
        })
        .collect())
}

/// "$0.10", "$0.10 + 1 unpriced", "2 unpriced", "in flight": never $0
/// for a call nobody could price or that has not ended.
#[cfg(feature = "ssr")]
fn cost_words(attempts: &[tollgate::store::Attempt]) -> Option<String> {
    let cost = tollgate::wire::CostSummary::from(attempts);
    let priced = attempts.iter().filter(|a| a.cost_usd.is_some()).count();
    match (priced, cost.unpriced_attempts) {
        (0, 0) if attempts.is_empty() => None,
        (0, 0) => Some("in flight".into()),
        (_, 0) => Some(format!("${}", cost.usd)),
        (0, n) => Some(format!("{n} unpriced")),
        (_, n) => Some(format!("${} + {n} unpriced", cost.usd)),
    }
}
