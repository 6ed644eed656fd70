//! Credits: the balance and the ledger behind it, a page at a time. Each
//! charge and refund names the edit it was for; the stored reference is
//! kept behind a toggle (issue 33, 9).

use super::edits::request_title;
use super::{LoadError, Pager};
use crate::data::{my_credits, CreditsData, EntryRow};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use tollgate::model::LedgerKind;

#[component]
pub fn CreditsPage() -> impl IntoView {
    let query = use_query_map();
    let data = Resource::new_blocking(move || query.with(|q| q.get("cursor")), my_credits);
    view! {
        <Title text="Credits" />
        <header class="page-head">
            <h1>"Credits"</h1>
            <p class="lede">"Every grant, charge and refund, newest first. The balance is the sum of them all."</p>
        </header>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <CreditsView data=d /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// What an entry was for, in words: the edit it charged or refunded
/// (linked), or the reason an admin gave.
fn entry_what(e: &EntryRow) -> AnyView {
    let edit = e.job.clone().map(|(id, request)| {
        view! { <a href=format!("/edits/{id}") data-testid="job-ref">{request_title(&request)}</a> }
    });
    let reason = e.reason.clone().filter(|r| !r.is_empty());
    match (e.kind, edit) {
        (LedgerKind::Debit, Some(a)) => view! { <span>"Ordered "{a}</span> }.into_any(),
        (LedgerKind::Refund, Some(a)) => view! { <span>"Refund for "{a}</span> }.into_any(),
        (LedgerKind::Grant, _) => {
            view! { <span>{reason.unwrap_or_else(|| "Granted by an admin".into())}</span> }
                .into_any()
        }
        (_, _) => {
            view! { <span>{reason.unwrap_or_else(|| e.kind.label().to_string())}</span> }.into_any()
        }
    }
}

#[component]
fn CreditsView(data: CreditsData) -> impl IntoView {
    let empty = data.entries.list_is_empty();
    let pager =
        view! { <Pager path="/credits".to_string() page=data.entries.clone() noun="entries" /> };
    let rows = data
        .entries
        .rows
        .into_iter()
        .map(|e| {
            let (class, sign) = if e.amount > 0 { ("amount amount-pos", "+") } else { ("amount amount-neg", "") };
            let what = entry_what(&e);
            view! {
                <tr data-testid="entry-row">
                    <td class="nowrap" data-label="When">{e.when.clone()}</td>
                    <td data-label="What" class="entry-what">
                        {what}
                        <details class="entry-ref">
                            <summary class="small muted">"Reference"</summary>
                            <code class="small">{e.reference.clone()}</code>
                        </details>
                    </td>
                    <td data-label="Kind"><span class=format!("badge badge-{}", e.kind.as_str())>{e.kind.label()}</span></td>
                    <td class="num" data-label="Amount"><span class=class>{format!("{sign}{}", e.amount)}</span></td>
                </tr>
            }
        })
        .collect::<Vec<_>>();
    view! {
        <section class="card stat-card">
            <span class="stat-label">"Balance"</span>
            <span class="stat-value" data-testid="balance">{data.balance}</span>
            <span class="stat-unit">"credits"</span>
        </section>
        <section class="card">
            <h2 class="card-title">"History"</h2>
            {if empty {
                view! { <p class="empty">"No entries yet. An admin can grant you credits."</p> }.into_any()
            } else {
                view! {
                    <div class="table-wrap">
                        <table class="table ledger-table" data-testid="ledger">
                            <thead>
                                <tr>
                                    <th scope="col">"When"</th>
                                    <th scope="col">"What"</th>
                                    <th scope="col">"Kind"</th>
                                    <th scope="col" class="num">"Amount"</th>
                                </tr>
                            </thead>
                            <tbody>{rows}</tbody>
                        </table>
                    </div>
                    {pager}
                }
                .into_any()
            }}
        </section>
    }
}
