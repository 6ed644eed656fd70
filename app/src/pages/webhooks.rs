//! Webhook pages: on Account, a person's endpoints (the secret shown once
//! when made or rotated), a test event, and recent deliveries with their
//! status codes and next try; `/admin/webhooks`, every delivery by state,
//! dead ones first, replay one, or everything dead for an endpoint since a
//! time with the count shown before it is confirmed.

use super::{LoadError, Pager};
use crate::data::{
    load_admin_webhooks, load_my_webhooks, AdminWebhooks, DeliveryRow, EndpointRow, MyWebhooks,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use tollgate::model::{DeliveryState, WebhookEvent};

fn event_label(e: WebhookEvent) -> &'static str {
    match e {
        WebhookEvent::Succeeded => "succeeded",
        WebhookEvent::Failed => "failed",
        WebhookEvent::Cancelled => "cancelled",
        WebhookEvent::Parked => "parked",
        WebhookEvent::Test => "test",
    }
}

/// The Account page's webhooks section.
#[component]
pub fn WebhooksSection() -> impl IntoView {
    let cursor = use_query_map()
        .get_untracked()
        .get("cursor")
        .filter(|c| !c.is_empty());
    let data = Resource::new_blocking(move || cursor.clone(), load_my_webhooks);
    view! {
        <section class="card" data-testid="webhooks">
            <h2 class="card-title">"Webhooks"</h2>
            <p class="muted">
                "Tollgate posts your jobs' events to your endpoints, signed per Standard Webhooks ("
                <code>"webhook-id"</code>", "<code>"webhook-timestamp"</code>", "<code>"webhook-signature"</code>
                "). A failed delivery is tried again with backoff; the same event always carries the same id."
            </p>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(w) => view! { <MyWebhooksView w=w /> }.into_any(),
                        Err(e) => view! { <LoadError error=e /> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn MyWebhooksView(w: MyWebhooks) -> impl IntoView {
    let checks = w
        .events
        .iter()
        .map(|e| {
            let name = format!("ev_{}", event_label(*e));
            view! {
                <label class="check"><input type="checkbox" name=name value="1" checked=true />{format!(" {}", e.as_str())}</label>
            }
        })
        .collect_view();
    let endpoints = if w.endpoints.is_empty() {
        view! { <p class="empty">"No endpoints yet."</p> }.into_any()
    } else {
        view! { <EndpointTable rows=w.endpoints.clone() mine=true /> }.into_any()
    };
    // A refused endpoint comes back here with what was typed and why, so
    // the error sits beside the form and nothing is typed twice.
    let query = use_query_map().get_untracked();
    let typed = query.get("webhook_url").unwrap_or_default();
    let refused = query.get("webhook_error").filter(|e| !e.is_empty());
    view! {
        <form method="post" action="/account/webhooks" class="form" data-testid="add-endpoint" id="add-endpoint">
            {refused.map(|e| view! { <div class="flash flash-error" role="alert" data-testid="endpoint-error"><p>{e}</p></div> })}
            <div class="field">
                <label for="wh-url">"Endpoint URL"</label>
                <input id="wh-url" name="url" type="url" required maxlength="2000" placeholder="https://example.com/tollgate-events" value=typed />
                <span class="hint">"https:// only; addresses inside private networks are refused."</span>
            </div>
            <fieldset class="field accounting">
                <legend>"Events"</legend>
                {checks}
            </fieldset>
            <button type="submit" class="btn btn-primary">"Add endpoint"</button>
        </form>
        <h3 class="action-title section-gap">"Endpoints"</h3>
        {endpoints}
        <h3 class="action-title section-gap" id="deliveries">"Your deliveries"</h3>
        <DeliveryTable rows=w.deliveries.rows.clone() admin=false />
        <Pager path="/account".to_string() page=w.deliveries.clone() noun="deliveries" anchor="#deliveries" />
        <div class="account-secret">
            <p class="small muted">
                "A job's own " <code>"webhook_url"</code> " is signed with your account secret: "
                <code>"GET /v1/webhook-secret"</code> ". A new one is shown once; the old one keeps signing beside it for 24 hours."
            </p>
            <form method="post" action="/account/webhook-secret/rotate" class="inline-form">
                <button type="submit" class="btn btn-small">"Rotate account secret"</button>
            </form>
        </div>
    }
}

#[component]
fn EndpointTable(rows: Vec<EndpointRow>, mine: bool) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|e| {
            let state = if e.disabled {
                view! { <span class="badge badge-disabled" title=e.disabled_reason.clone().unwrap_or_default()>"Disabled"</span> }.into_any()
            } else if e.failing_since.is_some() {
                view! { <span class="badge badge-warning">"Failing"</span> }.into_any()
            } else {
                view! { <span class="badge badge-open">"Active"</span> }.into_any()
            };
            let actions = mine.then(|| {
                let id = e.id.clone();
                view! {
                    <form method="post" action=format!("/account/webhooks/{id}/test") class="inline-form">
                        <button type="submit" class="btn btn-small" disabled=e.disabled>"Send test event"</button>
                    </form>
                    <form method="post" action=format!("/account/webhooks/{id}/rotate") class="inline-form">
                        <button type="submit" class="btn btn-small">"Rotate secret"</button>
                    </form>
                    <form method="post" action=format!("/account/webhooks/{id}/delete") class="inline-form">
                        <button type="submit" class="btn btn-danger btn-small">"Delete"</button>
                    </form>
                }
            });
            view! {
                <tr data-testid="endpoint-row">
                    <td data-label="URL"><div><div class="mono small">{e.url.clone()}</div>
                        {(!mine).then(|| view! { <div class="small muted">{e.owner.clone()}</div> })}
                        {e.disabled_reason.clone().map(|r| view! { <div class="small danger-text" data-testid="disabled-reason">{r}</div> })}
                        {e.rotating_until.clone().map(|r| view! { <div class="small muted">{format!("Both secrets sign until {r}")}</div> })}
                        {e.failing_since.clone().map(|f| view! { <div class="small muted">{format!("Failing since {f}")}</div> })}
                    </div></td>
                    <td data-label="Events" class="small">{e.events.iter().map(|x| event_label(*x)).collect::<Vec<_>>().join(", ")}</td>
                    <td data-label="State">{state}</td>
                    <td class="actions">{actions}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap">
            <table class="table" data-testid="endpoints">
                <thead><tr><th scope="col">"URL"</th><th scope="col">"Events"</th><th scope="col">"State"</th><th scope="col"><span class="visually-hidden">"Actions"</span></th></tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}

#[component]
fn DeliveryTable(rows: Vec<DeliveryRow>, admin: bool) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="empty" data-testid="no-deliveries">"No deliveries."</p> }
            .into_any();
    }
    let body = rows
        .into_iter()
        .map(|d| {
            let replay = (admin && d.state != DeliveryState::Pending).then(|| {
                view! {
                    <form method="post" action=format!("/admin/webhooks/{}/replay", d.id) class="inline-form">
                        <button type="submit" class="btn btn-small">"Replay"</button>
                    </form>
                }
            });
            view! {
                <tr data-testid="delivery-row">
                    <td data-label="Event"><div><div class="cell-title">{event_label(d.event)}</div>
                        <div class="mono small muted" title="webhook-id">{d.webhook_id.clone()}</div></div></td>
                    {admin.then(|| view! { <td data-label="Owner" class="small">{d.owner.clone()}</td> })}
                    <td data-label="URL" class="mono small">{d.url.clone()}</td>
                    <td data-label="State"><span class=format!("badge delivery-{}", d.state.as_str())>{d.state.as_str()}</span>
                        {(d.replays > 0).then(|| view! { <div class="small muted">{format!("replayed {}×", d.replays)}</div> })}</td>
                    <td data-label="Tries" class="num">{d.attempts}</td>
                    <td data-label="Last answer" class="small">
                        {d.last_status.map(|s| view! { <span class="mono" data-testid="last-status">{s}</span> })}
                        {d.last_error.clone().map(|e| view! { <div class="muted">{e}</div> })}
                    </td>
                    <td data-label="Next try" class="small nowrap">{d.next_try.clone().unwrap_or_else(|| "—".into())}</td>
                    <td class="actions">{replay}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap">
            <table class="table" data-testid="deliveries">
                <thead><tr>
                    <th scope="col">"Event"</th>
                    {admin.then(|| view! { <th scope="col">"Owner"</th> })}
                    <th scope="col">"URL"</th><th scope="col">"State"</th><th scope="col" class="num">"Tries"</th>
                    <th scope="col">"Last answer"</th><th scope="col">"Next try"</th>
                    <th scope="col"><span class="visually-hidden">"Replay"</span></th>
                </tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
    .into_any()
}

// ----------------------------------------------------- /admin/webhooks

#[component]
pub fn AdminWebhooksPage() -> impl IntoView {
    let q = use_query_map().get_untracked();
    let get = |k: &str| q.get(k).filter(|v| !v.is_empty());
    let (state, endpoint, since) = (get("state"), get("endpoint"), get("since"));
    let cursor = get("cursor");
    let data = Resource::new_blocking(
        move || {
            (
                state.clone(),
                endpoint.clone(),
                since.clone(),
                cursor.clone(),
            )
        },
        |(s, e, t, c)| load_admin_webhooks(s, e, t, c),
    );
    view! {
        <Title text="Webhooks" />
        <header class="page-head">
            <h1>"Webhooks"</h1>
            <p class="lede">"Every delivery, across all users. Dead ones keep their exact envelope: a replay sends it again with the same webhook-id and a new signature."</p>
        </header>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(w) => view! { <AdminView w=w /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn AdminView(w: AdminWebhooks) -> impl IntoView {
    let tabs = w
        .counts
        .iter()
        .map(|(s, n)| {
            let here = (*s == w.state).then_some("page");
            view! { <a class="nav-link" href=format!("/admin/webhooks?state={s}") aria-current=here data-testid=format!("tab-{s}")>{format!("{s} ({n})")}</a> }
        })
        .collect_view();
    let endpoint_options = w
        .endpoints
        .iter()
        .map(|e| view! { <option value=e.id.clone()>{format!("{} — {}", e.url, e.owner)}</option> })
        .collect_view();
    let preview = w.preview.clone().map(|p| {
        view! {
            <div class="callout warning" data-testid="replay-preview">
                <strong>{format!("{} dead deliver{} to {} since {}.", p.count, if p.count == 1 { "y" } else { "ies" }, p.url, p.since)}</strong>
                {(p.count > 0).then(|| view! {
                    <form method="post" action=format!("/admin/webhooks/endpoints/{}/replay", p.endpoint) class="inline-form">
                        <input type="hidden" name="since" value=p.since.clone() />
                        <button type="submit" class="btn btn-primary" data-testid="replay-all">{format!("Replay all {}", p.count)}</button>
                    </form>
                })}
            </div>
        }
    });
    view! {
        <section class="money-grid">
            {w.counts.iter().map(|(s, n)| view! {
                <div class="card money-tile"><div class="stat-label">{s.clone()}</div><div class="money-value">{*n}</div></div>
            }).collect_view()}
            <div class="card money-tile"><div class="stat-label">"Oldest pending"</div><div class="small">{w.oldest_pending.clone().unwrap_or_else(|| "none".into())}</div></div>
        </section>
        <section class="card">
            <h2 class="card-title">"Replay everything dead since a time"</h2>
            <form method="get" action="/admin/webhooks" class="form form-inline attempt-filters">
                <input type="hidden" name="state" value="dead" />
                <div class="field grow">
                    <label for="rp-endpoint">"Endpoint"</label>
                    <select id="rp-endpoint" name="endpoint" required>{endpoint_options}</select>
                </div>
                <div class="field">
                    <label for="rp-since">"Since (UTC)"</label>
                    <input id="rp-since" name="since" type="datetime-local" required />
                </div>
                <button type="submit" class="btn">"Count them"</button>
            </form>
            {preview}
        </section>
        <section class="card">
            <nav class="nav filters" aria-label="Deliveries by state">{tabs}</nav>
            <DeliveryTable rows=w.deliveries.rows.clone() admin=true />
            <Pager path=format!("/admin/webhooks?state={}", urlencoding::encode(&w.state)) page=w.deliveries.clone() noun="deliveries" />
        </section>
        <section class="card">
            <h2 class="card-title">"Endpoints"</h2>
            {if w.endpoints.is_empty() {
                view! { <p class="empty">"No endpoints."</p> }.into_any()
            } else {
                view! { <EndpointTable rows=w.endpoints.clone() mine=false /> }.into_any()
            }}
        </section>
    }
}
