//! Admin: every job, newest first, filterable by status; each links to its
//! timeline (steps, attempts with cost or "unpriced", claims, refunds).

use super::edits::{request_title, status_badge};
use super::{LoadError, Pager};
use crate::data::{all_jobs, AdminJobRow};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use tollgate::model::JobStatus;

#[component]
pub fn AdminJobsPage() -> impl IntoView {
    let query = use_query_map().get_untracked();
    let get = |k: &str| query.get(k).filter(|s| !s.is_empty());
    let (status, cursor) = (get("status"), get("cursor"));
    let current = status.clone().unwrap_or_default();
    let path = match &status {
        Some(s) => format!("/admin/jobs?status={}", urlencoding::encode(s)),
        None => "/admin/jobs".to_string(),
    };
    let jobs = Resource::new_blocking(
        move || (status.clone(), cursor.clone()),
        |(status, cursor)| all_jobs(status, cursor),
    );
    let filters = std::iter::once(("".to_string(), "All".to_string()))
        .chain(
            JobStatus::ALL
                .iter()
                .map(|s| (s.as_str().to_string(), s.label().to_string())),
        )
        .map(|(value, label)| {
            let href = if value.is_empty() {
                "/admin/jobs".to_string()
            } else {
                format!("/admin/jobs?status={value}")
            };
            let here = (value == current).then_some("page");
            view! { <a class="nav-link" href=href aria-current=here>{label}</a> }
        })
        .collect_view();
    view! {
        <Title text="Jobs" />
        <header class="page-head">
            <h1>"Jobs"</h1>
            <p class="lede">"Every job, newest first. Open one for its timeline: steps, attempts, claims and money."</p>
        </header>
        <nav class="nav filters" aria-label="Filter by status">{filters}</nav>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let path = path.clone();
                Suspend::new(async move {
                    match jobs.await {
                        Ok(page) if page.list_is_empty() => view! { <p class="empty">"No jobs."</p> }.into_any(),
                        Ok(page) => view! {
                            <JobTable rows=page.rows.clone() />
                            <Pager path=path page=page noun="jobs" />
                        }.into_any(),
                        Err(e) => view! { <LoadError error=e /> }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

#[component]
fn JobTable(rows: Vec<AdminJobRow>) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|r| {
            let href = format!("/edits/{}", r.job.id);
            view! {
                <tr>
                    <td class="nowrap" data-label="Ordered">{r.job.created.clone()}</td>
                    <td data-label="Who">{r.owner}</td>
                    <td data-label="What"><a href=href>{request_title(&r.job.request)}</a></td>
                    <td data-label="Status">{status_badge(r.job.status)}</td>
                    <td class="num" data-label="Credits">{r.job.credits}</td>
                    <td class="mono small" data-label="Estimate">{format!("${}", r.job.estimated_usd)}</td>
                </tr>
            }
        })
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
                        </tr>
                    </thead>
                    <tbody>{body}</tbody>
                </table>
            </div>
        </section>
    }
}
