//! My edits (a list with status and thumbnails) and one edit's detail.

use super::LoadError;
use crate::data::{load_job_detail, my_jobs, AttemptRow, JobDetail, JobRow, ParkedRow};
use crate::islands::{BeforeAfter, LiveStatus};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use tollgate::model::{style, JobRequest, JobStatus};

pub fn status_badge(status: JobStatus) -> impl IntoView {
    view! { <span class=format!("badge status status-{}", status.as_str())>{status.label()}</span> }
}

/// A short title for a request: "Embroidery · pet" or "Video · 5 s 1080p".
pub fn request_title(r: &JobRequest) -> String {
    match r {
        JobRequest::ImageEdit(e) => {
            let name = style(&e.style).map(|s| s.name).unwrap_or(e.style.as_str());
            format!("{name} · {}", e.target.kind.as_str())
        }
        JobRequest::Video(v) => format!("Video · {} s {}", v.duration_s, v.resolution.as_str()),
    }
}

fn thumbnail(r: &JobRequest) -> Option<String> {
    match r {
        JobRequest::ImageEdit(e) => Some(e.source.to_string()),
        JobRequest::Video(v) => v.source.map(|s| s.to_string()),
    }
}

#[component]
pub fn EditsPage() -> impl IntoView {
    let jobs = Resource::new_blocking(|| (), |_| my_jobs());
    view! {
        <Title text="My edits" />
        <header class="page-head page-head-row">
            <div>
                <h1>"My edits"</h1>
                <p class="lede">"Everything you have ordered, newest first."</p>
            </div>
            <a class="btn btn-primary" href="/edits/new">"New edit"</a>
        </header>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match jobs.await {
                    Ok(list) if list.is_empty() => view! {
                        <section class="card empty-state">
                            <h2>"No edits yet"</h2>
                            <p class="muted">"Upload a photo, pick what to change and a handmade medium."</p>
                            <a class="btn btn-primary" href="/edits/new">"Make your first edit"</a>
                        </section>
                    }.into_any(),
                    Ok(list) => view! { <JobGrid jobs=list /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn JobGrid(jobs: Vec<JobRow>) -> impl IntoView {
    let cards = jobs
        .into_iter()
        .map(|j| {
            let href = format!("/edits/{}", j.id);
            let title = request_title(&j.request);
            let thumb = thumbnail(&j.request);
            view! {
                <a class="job-card" href=href data-testid="job-card">
                    <div class="job-thumb">
                        {match thumb {
                            Some(id) => view! { <img src=format!("/v1/assets/{id}/content") alt="" loading="lazy" /> }.into_any(),
                            None => view! { <span class="job-thumb-empty" aria-hidden="true">"▶"</span> }.into_any(),
                        }}
                    </div>
                    <div class="job-body">
                        <div class="job-title">{title}</div>
                        <div class="job-meta">
                            {status_badge(j.status)}
                            <span class="muted small">{format!("{} credits · {}", j.credits, j.created)}</span>
                        </div>
                    </div>
                </a>
            }
        })
        .collect::<Vec<_>>();
    view! { <div class="job-grid">{cards}</div> }
}

#[component]
pub fn EditDetailPage() -> impl IntoView {
    let id = use_params_map()
        .get_untracked()
        .get("id")
        .unwrap_or_default();
    let detail = Resource::new_blocking(move || id.clone(), load_job_detail);
    view! {
        <Title text="Edit" />
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(d) => view! { <Detail detail=d /> }.into_any(),
                    Err(e) => view! { <LoadError error=e /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Detail(detail: JobDetail) -> impl IntoView {
    let JobDetail {
        job,
        events,
        attempts,
        parked,
    } = detail;
    // Queued and running jobs are followed live; a parked one waits for a
    // person, and its notice says so instead of a spinner.
    let live = matches!(job.status, JobStatus::Queued | JobStatus::Running)
        .then(|| (job.id.clone(), job.status.as_str().to_string()));
    let result = job.output_url.clone();
    let is_video = matches!(job.request, JobRequest::Video(_));
    let review = job.review.clone();
    let questions = job.questions.clone();
    let title = request_title(&job.request);
    let cancellable = !job.status.is_terminal();
    let cancel_action = format!("/edits/{}/cancel", job.id);
    let facts = match &job.request {
        JobRequest::ImageEdit(e) => {
            let medium = style(&e.style)
                .map(|s| s.name)
                .unwrap_or(e.style.as_str())
                .to_string();
            let mut rows = vec![
                ("What to change", e.target.kind.label().to_string()),
                ("Medium", medium),
                ("Strength", e.strength.label().to_string()),
            ];
            if !e.target.description.is_empty() {
                rows.insert(1, ("Description", e.target.description.clone()));
            }
            rows
        }
        JobRequest::Video(v) => vec![
            ("Prompt", v.prompt.clone()),
            ("Model", v.model.clone()),
            (
                "Length",
                format!("{} s at {}", v.duration_s, v.resolution.as_str()),
            ),
        ],
    };
    let images = match &job.request {
        JobRequest::ImageEdit(e) => {
            let mask = e.target.mask.map(|m| format!("/v1/assets/{m}/content"));
            Some((format!("/v1/assets/{}/content", e.source), mask))
        }
        JobRequest::Video(_) => None,
    };
    view! {
        <header class="page-head page-head-row">
            <div>
                <p class="crumbs"><a href="/edits">"My edits"</a></p>
                <h1>{title}</h1>
                <div class="job-meta">
                    <span data-testid="job-status">{status_badge(job.status)}</span>
                    <span class="muted">{format!("Ordered {}", job.created)}</span>
                </div>
            </div>
            {cancellable.then(|| view! {
                <form method="post" action=cancel_action class="inline-form">
                    <button type="submit" class="btn btn-danger">"Cancel and refund"</button>
                </form>
            })}
        </header>
        {live.map(|(id, status)| view! { <LiveStatus job_id=id status=status /> })}
        <div class="grid-2">
            <section class="card">
                <h2 class="card-title">{if result.is_some() { "Result" } else if is_video { "Clip" } else { "Your photo" }}</h2>
                {match (result.clone(), images.clone()) {
                    (Some(out), Some((before, _))) => view! { <BeforeAfter before=before after=out /> }.into_any(),
                    (Some(out), None) => view! { <img class="result-clip" src=out alt="The generated clip" data-testid="result-image" /> }.into_any(),
                    _ => ().into_any(),
                }}
                {review.map(|(verdict, notes)| view! {
                    <p class=format!("review review-{verdict}") data-testid="review">
                        <strong>{match verdict.as_str() { "passed" => "Review passed. ", "issues" => "Review found issues. ", _ => "Not verified. " }}</strong>
                        {notes}
                    </p>
                })}
                {job.error.map(|e| view! { <div class="flash flash-error" role="alert"><p>{e}</p></div> })}
                {(!questions.is_empty()).then(|| view! {
                    <div class="questions">
                        <p><strong>"Before we try again:"</strong></p>
                        <ul>{questions.into_iter().map(|q| view! { <li>{q}</li> }).collect_view()}</ul>
                        <a class="btn btn-primary" href="/edits/new">"Start a new edit"</a>
                    </div>
                })}
                {match (result.is_some(), images) {
                    (false, Some((src, mask))) => view! {
                        <div class="photo-frame">
                            <img src=src alt="The photo you uploaded" />
                            {mask.map(|m| view! { <img class="mask-overlay" src=m alt="The area you painted" /> })}
                        </div>
                    }.into_any(),
                    (false, None) => view! { <p class="muted">"A video is generated from the prompt."</p> }.into_any(),
                    (true, _) => ().into_any(),
                }}
            </section>
            <section class="card">
                <h2 class="card-title">"Order"</h2>
                <dl class="facts">
                    {facts.into_iter().map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> }).collect_view()}
                    <dt>"Price"</dt>
                    <dd data-testid="job-price">{format!("{} credits", job.credits)}</dd>
                    <dt>"Provider estimate"</dt>
                    <dd class="mono">{format!("${}", job.estimated_usd)}</dd>
                </dl>
                {parked.map(|p| view! { <ParkedNotice parked=p /> })}
                <h2 class="card-title">"Provider attempts"</h2>
                <AttemptList attempts=attempts />
                <h2 class="card-title">"Timeline"</h2>
                <ol class="timeline" data-testid="timeline">
                    {events.into_iter().map(|e| view! {
                        <li>
                            <span class="timeline-kind">{e.kind}</span>
                            <span class="muted small">{e.when}</span>
                            {(!e.detail.is_empty()).then(|| view! { <span class="small muted timeline-detail">{e.detail}</span> })}
                        </li>
                    }).collect_view()}
                </ol>
            </section>
        </div>
    }
}

#[component]
fn AttemptList(attempts: Vec<AttemptRow>) -> impl IntoView {
    if attempts.is_empty() {
        return view! { <p class="muted small">"No provider has been called."</p> }.into_any();
    }
    view! {
        <ul class="attempts" data-testid="attempts">
            {attempts.into_iter().map(|a| {
                let tone = match a.state.as_str() { "succeeded" => "succeeded", "failed" => "failed", _ => "running" };
                view! {
                <li>
                    <span class="mono small">{format!("#{} {} · {}", a.attempt_no, a.model, a.provider)}</span>
                    <span class=format!("badge status-{tone}")>{a.state}</span>
                    {a.error_class.map(|c| view! { <span class="badge">{c.replace('_', " ")}</span> })}
                    <span class="muted small">{a.duration_ms.map(|d| format!("{d} ms")).unwrap_or_default()}</span>
                    {a.provider_job_id.map(|id| view! { <span class="mono small muted" title="The provider's id for this call">{id}</span> })}
                    <span class="small">{match a.cost_usd {
                        Some(c) => format!("${c} ({})", a.cost_source.unwrap_or_default()),
                        None => "unpriced".to_string(),
                    }}</span>
                </li>
                }
            }).collect_view()}
        </ul>
    }
    .into_any()
}

/// A parked job: what is known, and that nothing more is spent until a
/// person decides; once decided, what the reviewer did, in plain words.
#[component]
fn ParkedNotice(parked: ParkedRow) -> impl IntoView {
    let stage = parked.stage.replace('_', " ");
    let link = parked.new_job.clone().map(|j| {
        view! { <p class="small"><a href=format!("/edits/{j}") data-testid="new-attempt-link">"See the new attempt →"</a></p> }
    });
    if !parked.active && parked.decision.is_none() {
        // Cancelled while waiting: the status says enough.
        return ().into_any();
    }
    if !parked.active {
        return view! {
            <div class="callout" data-testid="parked" role="status">
                <strong>"Reviewed"</strong>
                <p class="small">{parked.decision.unwrap_or_else(|| "The edit ended before a reviewer decided.".into())}</p>
                {link}
            </div>
        }
        .into_any();
    }
    view! {
        <div class="callout warning" data-testid="parked" role="status">
            <strong>{format!("Waiting for a reviewer: {stage}")}</strong>
            <p class="small">{parked.reason}</p>
            {parked.decision.map(|d| view! { <p class="small" data-testid="decision-words">{d}</p> })}
            <p class="small muted">
                "Nothing more is spent, and nothing is sent again, until a reviewer records a decision. "
                {parked.hold_usd.map(|h| format!("Budget held: ${h}. "))}
                {parked.provider_job_id.map(|id| format!("Provider id: {id}. "))}
                {format!("Since {}.", parked.since)}
            </p>
            {link}
        </div>
    }
    .into_any()
}
