//! Credits: the balance and the ledger behind it.

use super::LoadError;
use crate::data::{my_credits, CreditsData};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn CreditsPage() -> impl IntoView {
    let data = Resource::new_blocking(|| (), |_| my_credits());
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

/// A job's debit or refund links to the job.
fn reference_view(reference: String) -> impl IntoView {
    let job = reference
        .strip_prefix("debit:job:")
        .or_else(|| reference.strip_prefix("refund:job:"))
        .map(str::to_string);
    match job {
        Some(id) => {
            view! { <a href=format!("/edits/{id}") data-testid="job-ref">{reference.clone()}</a> }
                .into_any()
        }
        None => view! { <span>{reference}</span> }.into_any(),
    }
}

#[component]
fn CreditsView(data: CreditsData) -> impl IntoView {
    let rows = data
        .entries
        .into_iter()
        .map(|e| {
            let (class, sign) = if e.amount > 0 { ("amount amount-pos", "+") } else { ("amount amount-neg", "") };
            view! {
                <tr>
                    <td class="nowrap" data-label="When">{e.when}</td>
                    <td data-label="Kind"><span class=format!("badge badge-{}", e.kind.as_str())>{e.kind.label()}</span></td>
                    <td class="num" data-label="Amount"><span class=class>{format!("{sign}{}", e.amount)}</span></td>
                    <td class="mono small" data-label="Reference">{reference_view(e.reference)}</td>
                    <td data-label="Reason">{e.reason.unwrap_or_default()}</td>
                </tr>
            }
        })
        .collect::<Vec<_>>();
    let empty = rows.is_empty();
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
                        <table class="table" data-testid="ledger">
                            <thead>
                                <tr>
                                    <th scope="col">"When"</th>
                                    <th scope="col">"Kind"</th>
                                    <th scope="col" class="num">"Amount"</th>
                                    <th scope="col">"Reference"</th>
                                    <th scope="col">"Reason"</th>
                                </tr>
                            </thead>
                            <tbody>{rows}</tbody>
                        </table>
                    </div>
                }
                .into_any()
            }}
        </section>
    }
}
