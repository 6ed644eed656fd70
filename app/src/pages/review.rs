//! Reviewer pages (rule 12): `/review`, the queue of parked work (counts by
//! stage, filters in the URL, a banner when unresolved submissions pile up,
//! one decision for everything a filter matches), and `/review/{id}`, one
//! record: what is known, the evidence, what may have been spent and what
//! is held, the attempts and timeline, and only the actions its stage
//! permits, each a form that requires evidence.

use super::{LoadError, Pager, Timeline};
use crate::data::{
    load_review_queue, load_review_record, ActionRow, DecisionRow, QueueRow, ReviewAttemptRow,
    ReviewFilters, ReviewQueue, ReviewRecord, StageCount,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use tollgate::model::ParkedState;

/// From this many unresolved submissions on, the queue says so loudly.
const UNRESOLVED_BANNER_MIN: i64 = 3;

fn stage_badge(stage: &str, label: &str) -> impl IntoView {
    view! { <span class=format!("badge stage-{stage}")>{label.to_string()}</span> }
}

fn state_badge(state: ParkedState) -> impl IntoView {
    let label = match state {
        ParkedState::Open => "Waiting for a decision",
        ParkedState::Decided => "Decided: recovery pending",
        ParkedState::Recovering => "Recovering",
        ParkedState::Closed => "Closed",
    };
    view! { <span class=format!("badge review-{}", state.as_str()) data-testid="record-state">{label}</span> }
}

fn filters_from_url() -> ReviewFilters {
    let q = use_query_map().get_untracked();
    let get = |k: &str| q.get(k).filter(|v| !v.is_empty());
    ReviewFilters {
        stage: get("stage"),
        state: get("state"),
        model: get("model"),
        age: get("age"),
        sort: get("sort"),
        cursor: get("cursor"),
    }
}

// ---------------------------------------------------------------- /review

#[component]
pub fn ReviewQueuePage() -> impl IntoView {
    let filters = filters_from_url();
    let data = Resource::new_blocking(
        {
            let f = filters.clone();
            move || f.clone()
        },
        load_review_queue,
    );
    view! {
        <Title text="Review queue" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let filters = filters.clone();
                Suspend::new(async move {
                    match data.await {
                        Ok(q) => view! { <QueueView q=q filters=filters /> }.into_any(),
                        Err(e) => view! { <LoadError error=e /> }.into_any(),
                    }
                })
            }}
        </Suspense>
    }
}

#[component]
fn QueueView(q: ReviewQueue, filters: ReviewFilters) -> impl IntoView {
    let banner = (q.unresolved >= UNRESOLVED_BANNER_MIN).then(|| {
        view! {
            <div class="callout danger" role="status" data-testid="unresolved-banner">
                <strong>{format!("{} submissions may have been paid and have no answer.", q.unresolved)}</strong>
                <p>{format!(
                    "{} of them parked in the last hour. Look each up at the provider and reconcile it, or accept the failure with its accounting.",
                    q.unresolved_last_hour
                )}</p>
                <p><a href="/review?stage=submission_uncertain">"Show unresolved submissions"</a></p>
            </div>
        }
    });
    let path = match filters.query() {
        base if base.is_empty() => "/review".to_string(),
        base => format!("/review?{base}"),
    };
    let rows = q.page.rows.clone();
    let bulk = (q.matching_open > 0 && !q.bulk_actions.is_empty())
        .then(|| view! { <BulkForm q=q.clone() filters=filters.clone() /> });
    view! {
        <header class="page-head">
            <h1>"Review queue"</h1>
            <p class="lede">"Jobs Tollgate could not finish without knowing whether money was spent. Nothing is sent again and nothing more is spent until a decision is recorded here."</p>
        </header>
        {banner}
        <StageTiles counts=q.counts.clone() current=filters.stage.clone() />
        <section class="card">
            <QueueFilters models=q.models.clone() filters=filters.clone() />
            {if rows.is_empty() {
                view! { <p class="empty" data-testid="queue-empty">"Nothing waits for a decision here."</p> }.into_any()
            } else {
                view! { <QueueTable rows=rows /> }.into_any()
            }}
            <Pager path=path page=q.page.clone() noun="records" older="Next →" newer="← Previous" />
        </section>
        {bulk}
    }
}

/// Records waiting per stage, each a link to that stage's queue.
#[component]
fn StageTiles(counts: Vec<StageCount>, current: Option<String>) -> impl IntoView {
    let tiles = counts
        .iter()
        .map(|c| {
            let here = current.as_deref() == Some(c.stage.as_str());
            let href = format!("/review?stage={}", c.stage);
            view! {
                <a class="card money-tile tile-link stage-tile" class:tile-current=here href=href data-testid=format!("count-{}", c.stage)>
                    <div class="stat-label">{c.label.clone()}</div>
                    <div class="money-value">{c.open}</div>
                    <div class="small muted">
                        {if c.in_recovery > 0 { format!("waiting · {} in recovery", c.in_recovery) } else { "waiting for a decision".to_string() }}
                    </div>
                    {c.oldest.clone().map(|o| view! { <div class="small muted">{format!("oldest {o}")}</div> })}
                </a>
            }
        })
        .collect_view();
    view! { <section class="money-grid" data-testid="stage-counts">{tiles}</section> }
}

/// The queue's filters, each choice kept in the page's address.
#[component]
fn QueueFilters(models: Vec<String>, filters: ReviewFilters) -> impl IntoView {
    let option = |value: &str, label: &str, current: &Option<String>| {
        let selected = current.as_deref() == Some(value);
        view! { <option value=value.to_string() selected=selected>{label.to_string()}</option> }
    };
    let stage_options = tollgate::model::ParkedStage::ALL
        .iter()
        .map(|s| option(s.as_str(), s.label(), &filters.stage))
        .collect_view();
    let state_options = [
        ("open", "Waiting for a decision"),
        ("decided", "Decided"),
        ("recovering", "Recovering"),
        ("closed", "Closed"),
    ]
    .iter()
    .map(|(v, l)| option(v, l, &filters.state))
    .collect_view();
    let model_options = models
        .iter()
        .map(|m| option(m, m, &filters.model))
        .collect_view();
    let age_options = [
        ("1h", "over an hour"),
        ("1d", "over a day"),
        ("7d", "over a week"),
    ]
    .iter()
    .map(|(v, l)| option(v, l, &filters.age))
    .collect_view();
    let sort_options = option("exposure", "Most possibly spent first", &filters.sort);
    view! {
        <form method="get" action="/review" class="form form-inline attempt-filters" data-testid="queue-filters">
            <div class="field">
                <label for="f-stage">"Stage"</label>
                <select id="f-stage" name="stage"><option value="">"Any"</option>{stage_options}</select>
            </div>
            <div class="field">
                <label for="f-state">"State"</label>
                <select id="f-state" name="state"><option value="">"Not closed"</option>{state_options}</select>
            </div>
            <div class="field">
                <label for="f-model">"Model"</label>
                <select id="f-model" name="model"><option value="">"Any"</option>{model_options}</select>
            </div>
            <div class="field">
                <label for="f-age">"Waiting"</label>
                <select id="f-age" name="age"><option value="">"Any time"</option>{age_options}</select>
            </div>
            <div class="field">
                <label for="f-sort">"Order"</label>
                <select id="f-sort" name="sort"><option value="">"Oldest first"</option>{sort_options}</select>
            </div>
            <button type="submit" class="btn btn-primary">"Filter"</button>
            {(filters.query() != "").then(|| view! { <a class="small" href="/review">"Clear filters"</a> })}
        </form>
    }
}

#[component]
fn QueueTable(rows: Vec<QueueRow>) -> impl IntoView {
    let body = rows
        .into_iter()
        .map(|r| {
            let href = format!("/review/{}", r.id);
            view! {
                <tr data-testid="queue-row">
                    <td data-label="Job">
                        <a href=href.clone() class="cell-title mono">{r.job_id.chars().take(8).collect::<String>()}</a>
                        <div class="small muted reason">{r.reason.clone()}</div>
                    </td>
                    <td data-label="User">{r.user.clone()}</td>
                    <td data-label="Stage">{stage_badge(&r.stage, &r.stage_label)}<div class="small muted">{r.model.clone()}</div></td>
                    <td data-label="Waiting" class="nowrap" title=r.parked_at.clone()>{r.age.clone()}</td>
                    <td data-label="May have spent" class="nowrap">{r.exposure.clone()}</td>
                    <td data-label="Held" class="nowrap">{r.hold.clone().unwrap_or_else(|| "nothing".into())}</td>
                    <td data-label="State">
                        {state_badge(r.state)}
                        {r.decided.clone().map(|d| view! { <div class="small muted" data-testid="queue-decided">{d}</div> })}
                    </td>
                    <td class="actions"><a class="btn btn-small" href=href>"Open"</a></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="table-wrap">
            <table class="table" data-testid="queue">
                <thead>
                    <tr>
                        <th scope="col">"Job"</th>
                        <th scope="col">"User"</th>
                        <th scope="col">"Stage"</th>
                        <th scope="col">"Waiting"</th>
                        <th scope="col">"May have spent"</th>
                        <th scope="col">"Held"</th>
                        <th scope="col">"State"</th>
                        <th scope="col"><span class="visually-hidden">"Open"</span></th>
                    </tr>
                </thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}

/// One decision for every open record the filter matches (not just this
/// page). Each record still gets its own decision; the count is shown and
/// must be confirmed.
#[component]
fn BulkForm(q: ReviewQueue, filters: ReviewFilters) -> impl IntoView {
    let count = q.matching_open;
    let actions = q
        .bulk_actions
        .iter()
        .map(|(v, l)| view! { <option value=v.clone()>{l.clone()}</option> })
        .collect_view();
    let hidden = |name: &'static str, v: Option<String>| {
        v.map(|v| view! { <input type="hidden" name=name value=v /> })
    };
    view! {
        <section class="card" data-testid="bulk">
            <h2 class="card-title">"Decide everything this filter matches"</h2>
            <p class="small muted">{format!(
                "{count} open record{} match{} the filter above (every page, not just this one). Each gets its own decision with this evidence; a record that changed meanwhile is skipped and listed.",
                if count == 1 { "" } else { "s" },
                if count == 1 { "es" } else { "" }
            )}</p>
            <BulkMoney q=q.clone() />
            <form method="post" action="/review/bulk" class="form decision-form">
                {hidden("stage", filters.stage.clone())}
                {hidden("model", filters.model.clone())}
                {hidden("age", filters.age.clone())}
                <input type="hidden" name="expected" value=count.to_string() />
                <div class="field">
                    <label for="bulk-action">"Action"</label>
                    <select id="bulk-action" name="action" required>{actions}</select>
                </div>
                <div class="field">
                    <label for="bulk-evidence">"Evidence (required)"</label>
                    <textarea id="bulk-evidence" name="evidence" required maxlength="5000" rows="3" placeholder="What you checked, and what it showed"></textarea>
                </div>
                <fieldset class="field accounting">
                    <legend>"For accept failure"</legend>
                    <label class="check"><input type="checkbox" name="refund" value="1" />" Refund the credits"</label>
                    <label class="check"><input type="checkbox" name="release_hold" value="1" />" Release the budget hold (nothing was spent)"</label>
                </fieldset>
                <label class="check">
                    <input type="checkbox" name="confirm" value="1" required data-testid="bulk-confirm" />
                    {format!(" I confirm this applies to {count} record{}", if count == 1 { "" } else { "s" })}
                </label>
                <button type="submit" class="btn btn-primary" data-testid="bulk-submit">{format!("Apply to {count} record{}", if count == 1 { "" } else { "s" })}</button>
            </form>
        </section>
    }
}

/// What a bulk decision touches in money, before it is confirmed: each
/// record's possible duplicate cost and their sum, and for new attempts
/// what they would reserve against today's room.
#[component]
fn BulkMoney(q: ReviewQueue) -> impl IntoView {
    let b = q.bulk.clone();
    let n = b.records.len();
    let offers_new = q.bulk_actions.iter().any(|(a, _)| a == "new_attempt");
    let rows = b
        .records
        .iter()
        .map(|(id, exposure)| view! { <tr><td class="mono">{id.clone()}</td><td class="num">{exposure.clone()}</td></tr> })
        .collect_view();
    let fits = b.new_attempts_fit;
    let room = offers_new.then(|| {
        let tone = if fits < n { "callout warning" } else { "callout" };
        view! {
            <div class=tone data-testid="bulk-room">
                <p class="small">{format!(
                    "New attempts would reserve {} in all; today's budget has {} left, room for {fits} of {n}.",
                    b.new_attempts_total, b.day_room
                )}</p>
                {(fits < n).then(|| view! { <p class="small"><strong>{format!(
                    "Only the first {fits} would be started; the rest are skipped and stay in the queue."
                )}</strong></p> })}
            </div>
        }
    });
    view! {
        <div data-testid="bulk-costs">
            <p class="small">{format!(
                "What these jobs may already have cost (a new attempt may pay for that work again): {} in all.",
                b.exposure_total
            )}</p>
            <details class="small">
                <summary>{format!("Each record's possible duplicate cost ({n})")}</summary>
                <div class="table-wrap">
                    <table class="table">
                        <thead><tr><th>"Record"</th><th class="num">"May have cost"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            </details>
            {room}
        </div>
    }
}

// ----------------------------------------------------------- /review/{id}

#[component]
pub fn ReviewRecordPage() -> impl IntoView {
    let id = use_params_map()
        .get_untracked()
        .get("id")
        .unwrap_or_default();
    let data = Resource::new_blocking(move || id.clone(), load_review_record);
    view! {
        <Title text="Parked job" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(r) => view! { <RecordView r=r /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn RecordView(r: ReviewRecord) -> impl IntoView {
    let decisions = r.decisions.clone();
    let events = r.events.clone();
    view! {
        <header class="page-head page-head-row">
            <div>
                <p class="crumbs"><a href="/review">"Review queue"</a></p>
                <h1>{r.stage_label.clone()}</h1>
                <div class="job-meta">
                    {state_badge(r.state)}
                    <span class="muted">{format!("Parked {} ({} ago) · round {}", r.parked_at, r.age, r.round)}</span>
                </div>
            </div>
            <a class="btn btn-ghost" href=format!("/edits/{}", r.job_id)>"Open the job"</a>
        </header>
        <div class="grid-2">
            <EvidenceCard r=r.clone() />
            <div>
                <section class="money-grid money-grid-2">
                    <div class="card money-tile" data-testid="exposure">
                        <div class="stat-label">"May have been spent"</div>
                        <div class="money-value">{r.exposure.clone()}</div>
                        <div class="small muted">"known costs, plus the estimate for each call whose cost is unknown"</div>
                    </div>
                    <div class="card money-tile" data-testid="hold">
                        <div class="stat-label">"Budget held"</div>
                        <div class="money-value">{r.hold.clone().unwrap_or_else(|| "nothing".into())}</div>
                        <div class="small muted">"kept against the day until a decision"</div>
                    </div>
                </section>
                <DecideCard r=r.clone() />
                <section class="card">
                    <h2 class="card-title">"Add a note"</h2>
                    <form method="post" action=format!("/review/{}/note", r.id) class="form">
                        <div class="field">
                            <label for="note-text">"Note (evidence, not a decision)"</label>
                            <textarea id="note-text" name="text" required maxlength="5000" rows="2"></textarea>
                        </div>
                        <button type="submit" class="btn">"Add note"</button>
                    </form>
                </section>
            </div>
        </div>
        <RecordAttempts attempts=r.attempts.clone() />
        <div class="grid-2">
            <section class="card" data-testid="decisions">
                <h2 class="card-title">"Decisions"</h2>
                {if decisions.is_empty() {
                    view! { <p class="empty">"No decision yet."</p> }.into_any()
                } else {
                    view! { <ol class="decisions">{decisions.into_iter().map(|d| view! { <DecisionItem d=d /> }).collect_view()}</ol> }.into_any()
                }}
            </section>
            <section class="card">
                <h2 class="card-title">"Timeline"</h2>
                <Timeline events=events />
            </section>
        </div>
    }
}

/// What is known about the parked work, labelled, and the evidence as
/// recorded.
#[component]
fn EvidenceCard(r: ReviewRecord) -> impl IntoView {
    let evidence = r
        .evidence
        .iter()
        .map(|(k, v)| view! { <dt>{k.clone()}</dt><dd class="mono small">{v.clone()}</dd> })
        .collect_view();
    view! {
        <section class="card" data-testid="evidence">
            <h2 class="card-title">"What is known"</h2>
            <p><strong>{r.known.clone()}</strong></p>
            <p><span class="muted">"Tollgate's reading: "</span>{r.reason.clone()}</p>
            {r.last_error.clone().map(|e| view! { <p class="small"><span class="muted">"The last error seen (from the provider or our connection to it): "</span><span class="mono">{e}</span></p> })}
            <dl class="facts">
                <dt>"Job"</dt><dd class="mono small">{r.job_id.clone()}</dd>
                <dt>"Owner"</dt><dd>{r.user.clone()}</dd>
                <dt>"Job status"</dt><dd>{r.job_status.clone()}</dd>
                <dt>"Provider job id"</dt><dd class="mono small">{r.provider_job_id.clone().unwrap_or_else(|| "not known".into())}</dd>
                {evidence}
                <dt>"Request fingerprint"</dt><dd class="mono small" title="SHA-256 of the request's canonical body">{r.fingerprint.clone()}</dd>
                <dt>"Last observed"</dt><dd>{r.observed.clone()}</dd>
                <dt>"Status checks"</dt><dd>{r.polls}</dd>
                <dt>"Delivery tries"</dt><dd>{r.deliveries}</dd>
            </dl>
            <details class="small">
                <summary>"The evidence as recorded"</summary>
                <pre class="mono">{r.evidence_json.clone()}</pre>
            </details>
        </section>
    }
}

/// The actions this stage permits, or why there are none.
#[component]
fn DecideCard(r: ReviewRecord) -> impl IntoView {
    let actions = r.allowed.clone();
    if actions.is_empty() {
        let why = match r.state {
            ParkedState::Decided => "Decided: a worker will claim the recovery shortly.",
            ParkedState::Recovering => {
                "A worker holds the recovery; the record closes when its outcome is verified."
            }
            ParkedState::Open | ParkedState::Closed => "This record is closed.",
        };
        return view! { <section class="card"><p class="muted" data-testid="no-actions">{why}</p></section> }
            .into_any();
    }
    let (record_id, cancelled) = (r.id.clone(), r.job_cancelled);
    view! { <section class="card" data-testid="actions">
        <h2 class="card-title">"Decide"</h2>
        <p class="small muted">"Only what this stage permits. Your name is recorded with the decision; the evidence is required."</p>
        {actions.into_iter().map(|a| view! { <ActionForm record=record_id.clone() action=a exposure=r.exposure.clone() cancelled=cancelled /> }).collect_view()}
    </section> }
    .into_any()
}

#[component]
fn RecordAttempts(attempts: Vec<ReviewAttemptRow>) -> impl IntoView {
    let rows = attempts
        .iter()
        .map(|a| {
            view! {
                <tr data-testid="record-attempt">
                    <td>{format!("#{}", a.attempt_no)}</td>
                    <td><div class="cell-title">{a.model.clone()}</div><div class="small muted">{a.provider.clone()}</div></td>
                    <td><span class=format!("badge attempt-{}", a.state.as_str())>{a.state.as_str()}</span>
                        {a.error_class.map(|c| view! { <div class="small muted">{c.as_str()}</div> })}</td>
                    <td class="small">{a.cost.clone()}{a.hold.clone().map(|h| view! { <div class="small muted">{format!("held {h}")}</div> })}</td>
                    <td class="mono small">{a.provider_job_id.clone().unwrap_or_default()}<div class="muted">{a.idempotency_key.clone()}</div></td>
                    <td class="small nowrap">{a.started.clone()}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section class="card">
            <h2 class="card-title">"Attempts"</h2>
            <div class="table-wrap">
                <table class="table" data-testid="record-attempts">
                    <thead><tr><th scope="col">"#"</th><th scope="col">"Model"</th><th scope="col">"State"</th><th scope="col">"Cost"</th><th scope="col">"Provider id / our key"</th><th scope="col">"Sent"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        </section>
    }
}

#[component]
fn DecisionItem(d: DecisionRow) -> impl IntoView {
    view! {
        <li data-testid="decision">
            <div><strong>{d.label}</strong>" · "<span>{d.reviewer}</span>" · "<span class="muted small">{d.when}</span></div>
            <p class="small">{d.evidence}</p>
            {(!d.details.is_empty()).then(|| view! { <p class="small muted">{d.details}</p> })}
            {d.recovery.map(|r| view! { <p class="small" data-testid="recovery">{format!("Recovery: {r}")}</p> })}
            {d.new_job.map(|j| view! { <p class="small"><a href=format!("/edits/{j}")>"The new attempt →"</a></p> })}
        </li>
    }
}

/// One permitted action as a form: evidence always, and what the action
/// needs besides.
#[component]
fn ActionForm(
    record: String,
    action: ActionRow,
    exposure: String,
    cancelled: bool,
) -> impl IntoView {
    let id = format!("ev-{}", action.action);
    // The owner's cancel already refunded: the credits are not a choice.
    let refund = if cancelled {
        view! {
            <input type="hidden" name="refund" value="1" />
            <p class="small muted">"The owner cancelled this job and got the credits back then."</p>
        }
        .into_any()
    } else {
        view! {
            <label class="check"><input type="radio" name="refund" value="1" required />" Refund the credits"</label>
            <label class="check"><input type="radio" name="refund" value="0" />" Keep the credits (the provider may have been paid)"</label>
        }
        .into_any()
    };
    let extra = match action.action.as_str() {
        "reconcile" => view! {
            <div class="field">
                <label for="pjid">"Provider job id (found at the provider)"</label>
                <input id="pjid" name="provider_job_id" type="text" required maxlength="200" class="mono" pattern="[A-Za-z0-9._\\-]+" />
                <p class="small muted">"Find it in the provider's dashboard or request logs: the prediction made under this record's idempotency key, around the time it was sent (both under What is known). Tollgate asks the provider before it accepts the id."</p>
            </div>
        }
        .into_any(),
        "accept_failure" => view! {
            <fieldset class="field accounting">
                <legend>"Accounting"</legend>
                {refund}
                <label class="check"><input type="radio" name="release_hold" value="1" required />" Release the budget hold: nothing was spent"</label>
                <label class="check"><input type="radio" name="release_hold" value="0" />" Keep the hold booked at the estimate"</label>
            </fieldset>
        }
        .into_any(),
        "new_attempt" => view! {
            <div class="callout warning">
                <strong>{format!("The original may already have cost {exposure}.")}</strong>
                <p class="small">"A new attempt is a new, separately held call: it may pay again. The person is charged once; the duplicate cost is the studio's."</p>
                <label class="check"><input type="checkbox" name="confirm" value="1" required data-testid="confirm-new-attempt" />" I understand the possible duplicate cost"</label>
            </div>
        }
        .into_any(),
        _ => ().into_any(),
    };
    let danger = matches!(action.action.as_str(), "accept_failure" | "new_attempt");
    view! {
        <form method="post" action=format!("/review/{record}/decide") class="form decision-form" data-testid=format!("action-{}", action.action)>
            <input type="hidden" name="action" value=action.action.clone() />
            <h3 class="action-title">{action.label.clone()}</h3>
            {extra}
            <div class="field">
                <label for=id.clone()>"Evidence (required)"</label>
                <textarea id=id name="evidence" required maxlength="5000" rows="2" placeholder="What you checked, and what it showed"></textarea>
            </div>
            <button type="submit" class=if danger { "btn btn-danger" } else { "btn btn-primary" }>{action.label}</button>
        </form>
    }
}
