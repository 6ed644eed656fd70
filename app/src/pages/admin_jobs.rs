//! Admin: every job, newest first (or one person's), with how many are in
//! each status, what each really cost beside its estimate, why the failed
//! ones failed, a search by job id or idempotency key, and cancel. Each
//! links to its timeline (steps, attempts with cost or "unpriced", claims,
//! refunds). The filters are in the address.

use super::edits::{request_title, status_badge};
use super::{LoadError, Pager};
use crate::data::{all_jobs, AdminJobRow, AdminJobs, AdminJobsFilter};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AdminJobsPage() -> impl IntoView {
    let query = use_query_map().get_untracked();
    let get = |k: &str| {
        query
            .get(k)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let filter = AdminJobsFilter {
        status: get("status"),
        user: get("user"),
        find: get("find"),
        cursor: get("cursor"),
    };
    let jobs = Resource::new_blocking(move || filter.clone(), all_jobs);
    let (user, find) = (
        get("user").unwrap_or_default(),
        get("find").unwrap_or_default(),
    );
    let status = get("status");
    view! {
        <Title text="Jobs" />
        <header class="page-head">
            <h1>"Jobs"</h1>
            <p class="lede">"Every job, newest first. Open one for its timeline: steps, attempts, claims and money."</p>
        </header>
        <form method="get" action="/admin/jobs" class="form form-inline jobs-search card" data-testid="jobs-search">
            {status.clone().map(|s| view! { <input type="hidden" name="status" value=s /> })}
            <div class="field grow">
                <label for="jobs-user">"Person"</label>
                <input id="jobs-user" name="user" type="email" placeholder="Their email" value=user.clone() />
            </div>
            <div class="field grow">
                <label for="jobs-find">"Find"</label>
                <input id="jobs-find" name="find" type="search" placeholder="A job id or idempotency key" value=find />
            </div>
            <button type="submit" class="btn btn-ghost">"Search"</button>
        </form>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let (user, status) = (user.clone(), status.clone());
                Suspend::new(async move {
                    match jobs.await {
                        Ok(data) => view! { <JobsView data=data user=user status=status /> }.into_any(),
                        Err(e) => view! { <LoadError error=e /> }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

/// The status tabs (with counts), then the table and its pager.
#[component]
fn JobsView(data: AdminJobs, user: String, status: Option<String>) -> impl IntoView {
    let base = if user.is_empty() {
        "/admin/jobs".to_string()
    } else {
        format!("/admin/jobs?user={}", urlencoding::encode(&user))
    };
    let with = |extra: &str| {
        if extra.is_empty() {
            base.clone()
        } else if base.contains('?') {
            format!("{base}&{extra}")
        } else {
            format!("{base}?{extra}")
        }
    };
    let current = status.clone().unwrap_or_default();
    let tabs = std::iter::once((String::new(), "All".to_string(), data.total))
        .chain(data.counts.iter().cloned())
        .map(|(value, label, n)| {
            let here = (value == current).then_some("page");
            let href = if value.is_empty() {
                with("")
            } else {
                with(&format!("status={value}"))
            };
            let testid = if value.is_empty() {
                "count-all".to_string()
            } else {
                format!("count-{value}")
            };
            view! {
                <a class="nav-link" href=href aria-current=here data-testid=testid>{format!("{label} {n}")}</a>
            }
        })
        .collect_view();
    let path = with(&status.map(|s| format!("status={s}")).unwrap_or_default());
    let found = data.found.clone();
    view! {
        <nav class="nav filters" aria-label="Filter by status">{tabs}</nav>
        {found.map(|f| view! {
            <p class="muted small" data-testid="found">
                {format!("Jobs found for “{f}”. ")}<a href=base.clone()>"Back to the list"</a>
            </p>
        })}
        {if data.page.list_is_empty() {
            view! { <p class="empty">"No jobs."</p> }.into_any()
        } else {
            view! {
                <JobTable rows=data.page.rows.clone() />
                <Pager path=path page=data.page noun="jobs" />
            }
            .into_any()
        }}
    }
}

#[component]
fn JobTable(rows: Vec<AdminJobRow>) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|r| view! { <JobLine r=r /> })
        .collect::<Vec<_>>();
    view! {
        <section class="card">
            <div class="table-wrap">
                <table class="table" data-testid="jobs">
                    <thead>
                        <tr>
                            <th scope="col">"Ordered"</th>
                            <th scope="col">"Who"</th>
                            <th scope="col">"What"</th>
                            <th scope="col">"Status"</th>
                            <th scope="col" class="num">"Credits"</th>
                            <th scope="col">"Estimate"</th>
                            <th scope="col">"Cost"</th>
                            <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                        </tr>
                    </thead>
                    <tbody>{body}</tbody>
                </table>
            </div>
        </section>
    }
}

/// One job: what, whose, how it stands (and why, when it failed), what it
/// was charged, estimated and really cost; cancel while it is not over.
#[component]
fn JobLine(r: AdminJobRow) -> impl IntoView {
    let href = format!("/edits/{}", r.job.id);
    let cancel = format!("/edits/{}/cancel", r.job.id);
    let open = !r.job.status.is_terminal();
    let failed = r.job.status == tollgate::model::JobStatus::Failed;
    view! {
        <tr data-testid="job-row">
            <td class="nowrap" data-label="Ordered">{r.job.created.clone()}</td>
            <td data-label="Who">{r.owner}</td>
            <td data-label="What"><a href=href>{request_title(&r.job.request)}</a></td>
            <td data-label="Status">
                {status_badge(r.job.status, r.job.flagged())}
                {r.job.error.clone().filter(|_| failed).map(|e| view! { <div class="small muted job-why" data-testid="job-why">{e}</div> })}
            </td>
            <td class="num" data-label="Credits">{r.job.credits}</td>
            <td class="mono small" data-label="Estimate">{r.job.estimated_usd.clone()}</td>
            <td class="mono small" data-label="Cost" data-testid="job-cost">{r.cost.unwrap_or_else(|| "—".into())}</td>
            <td class="actions">
                {open.then(|| view! {
                    <form method="post" action=cancel class="inline-form">
                        <button type="submit" class="btn btn-danger btn-small">"Cancel and refund"</button>
                    </form>
                })}
            </td>
        </tr>
    }
}
