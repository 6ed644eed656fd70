//! One module per page, and the small parts several pages share. Pages
//! render what the server functions return; form posts go to the handlers
//! in `server`, which redirect back here.

mod account;
mod admin_jobs;
mod admin_money;
mod api_docs;
mod auth;
mod credits;
mod edits;
mod new_edit;
mod review;
mod status;
mod users;
mod webhooks;

pub use account::AccountPage;
pub use admin_jobs::AdminJobsPage;
pub use admin_money::{AdminOverviewPage, BudgetPage, SpendPage};
pub use api_docs::ApiDocsPage;
pub use auth::{LoginPage, SetupPage};
pub use credits::CreditsPage;
pub use edits::{EditDetailPage, EditsPage};
pub use new_edit::NewEditPage;
pub use review::{ReviewQueuePage, ReviewRecordPage};
pub use status::{ForbiddenPage, NotFoundPage};
pub use users::UsersPage;
pub use webhooks::{AdminWebhooksPage, WebhooksSection};

use crate::data::{Flash, FlashKind};
use crate::islands::CopyButton;
use leptos::prelude::*;
use tollgate::model::Role;

/// A failed load, said plainly.
#[component]
pub fn LoadError(error: ServerFnError) -> impl IntoView {
    let text = match error {
        ServerFnError::ServerError(m) => m,
        other => other.to_string(),
    };
    // Something named in the address that is not there (or not the
    // viewer's, which reads the same): a 404 page, not a 200 with a line.
    if let Some(what) = text.strip_suffix(" not found") {
        #[cfg(feature = "ssr")]
        status::set_status(404);
        let what = match what {
            "job" | "edit" => "edit",
            other => other,
        };
        return view! {
            <section class="card notice" data-testid="not-found">
                <h1>{format!("No such {what}")}</h1>
                <p class="lede">{format!("There is no {what} at this address, or it is not yours to see.")}</p>
                <a class="btn btn-primary" href="/edits">"Go to My edits"</a>
            </section>
        }
        .into_any();
    }
    view! { <div class="flash flash-error" role="alert"><p>{text}</p></div> }.into_any()
}

/// Where a page of a list sits and the way to the pages either side:
/// "Showing 25–48 of 116 edits", "← Newer", "Older →". `path` is the page
/// with its filters (`/admin/jobs?status=failed`); the cursor joins them.
#[component]
pub fn Pager<T: 'static>(
    path: String,
    page: crate::data::Paged<T>,
    noun: &'static str,
    /// The links' words: lists newest first go to older rows.
    #[prop(default = "Older →")]
    older: &'static str,
    #[prop(default = "← Newer")] newer: &'static str,
    /// Where on the page the list is (`#attempts`), so a new page opens there.
    #[prop(default = "")]
    anchor: &'static str,
) -> impl IntoView {
    let sep = if path.contains('?') { '&' } else { '?' };
    let href = |c: &String| format!("{path}{sep}cursor={}{anchor}", urlencoding::encode(c));
    let (newer_href, older_href) = (page.prev.as_ref().map(href), page.next.as_ref().map(href));
    let shown = page.rows.len() as u64;
    // One page is the whole list: there is nothing to page or place.
    if page.prev.is_none() && page.next.is_none() {
        return None;
    }
    let place = match page.place {
        _ if shown == 0 => Some(format!("No {noun} on this page")),
        Some(p) => Some(format!(
            "Showing {}–{} of {} {noun}",
            p.before + 1,
            p.before + shown,
            p.total
        )),
        None => None,
    };
    let newer = match newer_href {
        Some(h) => view! { <a class="btn btn-ghost" href=h rel="prev" data-testid="pager-prev">{newer}</a> }.into_any(),
        None => view! { <span class="btn btn-ghost" aria-disabled="true">{newer}</span> }.into_any(),
    };
    let older = match older_href {
        Some(h) => view! { <a class="btn btn-ghost" href=h rel="next" data-testid="pager-next">{older}</a> }.into_any(),
        None => view! { <span class="btn btn-ghost" aria-disabled="true">{older}</span> }.into_any(),
    };
    Some(view! {
        <nav class="pager pager-row" aria-label="Pages" data-testid="pager">
            <span class="muted small" data-testid="pager-place">{place}</span>
            <span class="pager-links">{newer}{older}</span>
        </nav>
    })
}

/// A person's role, as a small badge.
#[component]
pub fn RoleBadge(role: Role) -> impl IntoView {
    view! { <span class=format!("badge badge-{}", role.as_str())>{role.label()}</span> }
}

/// A one-time message, and the secret it shows once.
#[component]
pub fn FlashMessage(flash: Flash) -> impl IntoView {
    let (class, role) = match flash.kind {
        FlashKind::Ok => ("flash flash-ok", "status"),
        FlashKind::Error => ("flash flash-error", "alert"),
    };
    view! {
        <div class=class role=role>
            <p>{flash.message}</p>
            {flash.secret.map(|s| view! {
                <div class="secret">
                    <div class="secret-row">
                        <code id="new-secret">{s.clone()}</code>
                        <CopyButton text=s />
                    </div>
                    <p class="hint">"Copy it now: it will not be shown again."</p>
                </div>
            })}
        </div>
    }
}

/// Every timeline entry in words, for reviewers and admins (the job's page
/// and its parked record's), with what was recorded behind a toggle.
#[component]
pub fn Timeline(events: Vec<crate::data::EventRow>) -> impl IntoView {
    let recorded = events
        .iter()
        .map(|e| view! {
            <li>
                <code class="timeline-kind">{e.kind.clone()}</code>
                <span class="muted small">{e.when.clone()}</span>
                {(!e.detail.is_empty()).then(|| view! { <span class="small mono timeline-detail">{e.detail.clone()}</span> })}
            </li>
        })
        .collect_view();
    view! {
        <ol class="timeline" data-testid="timeline">
            {events.into_iter().map(|e| view! {
                <li>
                    <span class="timeline-what">{e.what}</span>
                    <span class="muted small">{e.when}</span>
                </li>
            }).collect_view()}
        </ol>
        <details class="recorded" data-testid="recorded">
            <summary class="small">"As recorded"</summary>
            <ol class="timeline timeline-recorded">{recorded}</ol>
        </details>
    }
}
