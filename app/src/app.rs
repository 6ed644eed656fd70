//! The document shell, the router, and the layout every page shares.

use crate::data::{load_page_context, Me, PageContext};
use crate::pages::*;
use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{path, SsrMode};
use tollgate::model::Role;

pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    page_security_policy();
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <link rel="icon" type="image/svg+xml" href="/favicon.svg" />
                <HydrationScripts options islands=true />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The page's Content-Security-Policy: only our own scripts (the hydration
/// scripts carry this response's nonce), styles and wasm; inline style
/// attributes only (the meters and chart bars), no other origin, never
/// framed. Set as a header, on the response being rendered.
#[cfg(feature = "ssr")]
fn page_security_policy() {
    use axum::http::{header, HeaderValue};
    let (Some(nonce), Some(response)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) else {
        return;
    };
    let policy = format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data: blob:; \
         connect-src 'self' data:; font-src 'self'; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    );
    if let Ok(v) = HeaderValue::from_str(&policy) {
        response.insert_header(header::CONTENT_SECURITY_POLICY, v);
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="tollgate" href="/pkg/tollgate.css" />
        <Title formatter=|t: String| if t.is_empty() { "Tollgate".to_string() } else { format!("{t} · Tollgate") } />
        <Router>
            <Routes fallback=|| view! { <Layout><NotFoundPage /></Layout> }>
                <Route path=path!("/login") view=LoginPage ssr=SsrMode::Async />
                <Route path=path!("/setup") view=SetupPage ssr=SsrMode::Async />
                <Route path=path!("/edits") view=|| view! { <Layout><EditsPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/edits/new") view=|| view! { <Layout><NewEditPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/edits/:id") view=|| view! { <Layout><EditDetailPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/credits") view=|| view! { <Layout><CreditsPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/account") view=|| view! { <Layout><AccountPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/review") view=|| view! { <Layout><ReviewQueuePage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/review/:id") view=|| view! { <Layout><ReviewRecordPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/admin") view=|| view! { <Layout><AdminOverviewPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/admin/spend") view=|| view! { <Layout><SpendPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/admin/budget") view=|| view! { <Layout><BudgetPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/admin/jobs") view=|| view! { <Layout><AdminJobsPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/admin/webhooks") view=|| view! { <Layout><AdminWebhooksPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/admin/users") view=|| view! { <Layout><UsersPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/docs/api") view=|| view! { <Layout><ApiDocsPage /></Layout> } ssr=SsrMode::Async />
                <Route path=path!("/forbidden") view=|| view! { <Layout><ForbiddenPage /></Layout> } ssr=SsrMode::Async />
            </Routes>
        </Router>
    }
}

/// Header with navigation by role, the flash message, and the page.
///
/// The page is built here, in the layout's body, never inside the
/// `<Suspense>`: a resource created inside a suspense's child closure can
/// stall server rendering, so each page creates its own resources at its top
/// level and reads them in its own, sibling `<Suspense>`.
#[component]
pub fn Layout(children: Children) -> impl IntoView {
    let ctx = Resource::new_blocking(|| (), |_| load_page_context());
    view! {
        <a class="skip-link" href="#main">"Skip to content"</a>
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let PageContext { me, flash } = ctx.await.unwrap_or(PageContext { me: None, flash: None });
                view! {
                    <TopBar me=me />
                    {flash.map(|f| view! { <div class="container flash-slot"><FlashMessage flash=f /></div> })}
                }
            })}
        </Suspense>
        <main id="main" class="container">{children()}</main>
    }
}

/// Where each role's day starts (issue 33, 12): an admin on the spend
/// overview, a reviewer on the review queue, everyone else on their edits.
pub fn home_of(role: Role) -> &'static str {
    match role {
        Role::Admin => "/admin",
        Role::Reviewer => "/review",
        Role::User => "/edits",
    }
}

struct NavItem {
    href: &'static str,
    label: &'static str,
    role: Role,
}

/// What each role sees. Items appear as their pages are built.
const NAV: &[NavItem] = &[
    NavItem {
        href: "/edits",
        label: "Edits",
        role: Role::User,
    },
    NavItem {
        href: "/credits",
        label: "Credits",
        role: Role::User,
    },
    NavItem {
        href: "/account",
        label: "Account",
        role: Role::User,
    },
    NavItem {
        href: "/review",
        label: "Review",
        role: Role::Reviewer,
    },
    NavItem {
        href: "/admin",
        label: "Spend",
        role: Role::Admin,
    },
    NavItem {
        href: "/admin/jobs",
        label: "Jobs",
        role: Role::Admin,
    },
    NavItem {
        href: "/admin/webhooks",
        label: "Webhooks",
        role: Role::Admin,
    },
    NavItem {
        href: "/admin/users",
        label: "Users",
        role: Role::Admin,
    },
];

/// Whether `href`'s item is the page at `path` (the spend overview owns
/// `/admin`, `/admin/spend` and `/admin/budget`, not every admin page).
fn is_current(path: &str, href: &str) -> bool {
    match href {
        "/admin" => path == "/admin" || path == "/admin/spend" || path == "/admin/budget",
        _ => path == href || path.starts_with(&format!("{href}/")),
    }
}

#[component]
fn TopBar(me: Option<Me>) -> impl IntoView {
    let path = leptos_router::hooks::use_location()
        .pathname
        .get_untracked();
    let nav = me.as_ref().map(|me| {
        let role = me.role;
        NAV.iter()
            .filter(move |item| role.allows(item.role))
            .map(|item| {
                let current = is_current(&path, item.href).then_some("page");
                view! { <a class="nav-link" href=item.href aria-current=current>{item.label}</a> }
            })
            .collect_view()
    });
    view! {
        <header class="topbar">
            <div class="topbar-inner">
                <a class="brand" href="/">
                    <span class="brand-mark" aria-hidden="true"></span>
                    "Tollgate"
                </a>
                <nav class="nav" aria-label="Main">{nav}</nav>
                {me.map(|me| view! {
                    // An admin's long menu wins the room: their email shows
                    // on hover, and in full on wide screens.
                    <div class="who" class:who-admin=me.role == Role::Admin title=me.email.clone()>
                        <span class="who-email" title=me.email.clone()>{me.email.clone()}</span>
                        <RoleBadge role=me.role />
                        <form method="post" action="/logout" class="inline-form">
                            <button type="submit" class="btn btn-ghost btn-small">"Sign out"</button>
                        </form>
                    </div>
                })}
            </div>
        </header>
    }
}
