//! One module per page. Pages render what the server functions return; form
//! posts go to the handlers in `server::forms`, which redirect back here.

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

use leptos::prelude::*;

/// A failed load, said plainly.
#[component]
pub fn LoadError(error: ServerFnError) -> impl IntoView {
    let text = match error {
        ServerFnError::ServerError(m) => m,
        other => other.to_string(),
    };
    view! { <div class="flash flash-error" role="alert"><p>{text}</p></div> }
}
