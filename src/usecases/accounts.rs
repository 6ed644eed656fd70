//! Accounts: first-run setup, users, roles, the disabled flag, passwords and
//! API tokens. Validation happens here, once, with errors naming the field.

use crate::model::{ApiTokenId, Email, Password, Role, UserId};
use crate::store::{ApiToken, NewApiToken, NewUser, User};
use crate::usecases::auth::{hash_password, new_api_token, verify_password};
use crate::usecases::error::{Error, Result};
use crate::Tollgate;
use chrono::Utc;

/// Longest API token name.
pub const TOKEN_NAME_LEN_MAX: usize = 100;

fn parse_email(raw: &str) -> Result<Email> {
    Email::parse(raw).map_err(|e| Error::invalid("email", e.to_string()))
}

impl Tollgate {
    /// Whether `/setup` is open: no admin exists and setup never ran.
    pub async fn setup_needed(&self) -> Result<bool> {
        Ok(self.store().setup_needed().await?)
    }

    /// Creates the first admin, for whoever holds the set-up token this
    /// node printed (or was given): reaching the form is not enough, or a
    /// stranger who finds a fresh node first would own it. Once an admin
    /// exists, this is `SETUP_COMPLETE`.
    pub async fn complete_setup(
        &self,
        token: &str,
        email: &str,
        password: &str,
        confirm: &str,
    ) -> Result<User> {
        if !self.setup_token_matches(token) {
            return Err(Error::invalid(
                "token",
                "this is not the set-up token the server printed when it started",
            ));
        }
        let email = parse_email(email)?;
        let password = Password::confirmed(password, confirm).map_err(|e| match e {
            crate::model::PasswordError::Mismatch => Error::invalid("confirm", e.to_string()),
            other => Error::invalid("password", other.to_string()),
        })?;
        if !self.setup_needed().await? {
            return Err(setup_complete());
        }
        let new = NewUser {
            id: UserId::new(),
            email,
            password_hash: hash_password(password.expose()).await?,
            role: Role::Admin,
            created_at: Utc::now(),
        };
        self.store()
            .complete_setup(&new)
            .await?
            .ok_or_else(setup_complete)
    }

    /// Adds a user (command line and the admin Users page).
    pub async fn add_user(&self, email: &str, role: Role, password: &str) -> Result<User> {
        let email = parse_email(email)?;
        let password =
            Password::new(password).map_err(|e| Error::invalid("password", e.to_string()))?;
        let new = NewUser {
            id: UserId::new(),
            email,
            password_hash: hash_password(password.expose()).await?,
            role,
            created_at: Utc::now(),
        };
        self.store().insert_user(&new).await.map_err(|e| match e {
            crate::store::StoreError::Conflict(_) => Error::Conflict {
                code: "EMAIL_TAKEN",
                message: "a user with that email already exists".into(),
            },
            other => other.into(),
        })
    }

    pub async fn user(&self, id: UserId) -> Result<User> {
        self.store()
            .user_by_id(id)
            .await?
            .ok_or(Error::NotFound("user"))
    }

    pub async fn user_by_email(&self, email: &str) -> Result<User> {
        let email = parse_email(email)?;
        self.store()
            .user_by_email(email.as_str())
            .await?
            .ok_or(Error::NotFound("user"))
    }

    pub async fn list_users(&self) -> Result<Vec<User>> {
        Ok(self.store().list_users().await?)
    }

    /// Changes a role. An admin cannot change their own role, so the last
    /// admin cannot lock everyone out.
    pub async fn set_role(&self, actor: &User, target: UserId, role: Role) -> Result<User> {
        if actor.id == target && role != actor.role {
            return Err(Error::Conflict {
                code: "CANNOT_CHANGE_OWN_ROLE",
                message: "you cannot change your own role; ask another admin".into(),
            });
        }
        self.store().set_user_role(target, role).await?;
        self.user(target).await
    }

    /// Disables or enables a user. A disabled user's sessions and tokens stop
    /// working at their next request. Nobody can disable themselves.
    pub async fn set_disabled(&self, actor: &User, target: UserId, disabled: bool) -> Result<User> {
        if actor.id == target && disabled {
            return Err(Error::Conflict {
                code: "CANNOT_DISABLE_SELF",
                message: "you cannot disable your own account".into(),
            });
        }
        self.store().set_user_disabled(target, disabled).await?;
        self.user(target).await
    }

    /// Changes a password, limited like sign-in attempts. Every session of
    /// the user started before now ends (the caller stamps its own again);
    /// with `revoke_tokens`, so does every API token. Returns the moment
    /// from which sessions are honoured.
    pub async fn change_password(
        &self,
        user: &User,
        current: &str,
        new: &str,
        confirm: &str,
        revoke_tokens: bool,
    ) -> Result<chrono::DateTime<chrono::Utc>> {
        self.login_limits()
            .check(&format!("password:{}", user.id), None)?;
        let hash = self
            .store()
            .password_hash(user.id)
            .await?
            .ok_or(Error::NotFound("user"))?;
        if !verify_password(hash, current).await {
            return Err(Error::invalid(
                "current_password",
                "the current password is not correct",
            ));
        }
        let new = Password::confirmed(new, confirm)
            .map_err(|e| Error::invalid("new_password", e.to_string()))?;
        let hash = hash_password(new.expose()).await?;
        let now = chrono::Utc::now();
        self.store().set_password_hash(user.id, &hash, now).await?;
        if revoke_tokens {
            self.store().revoke_all_tokens(user.id, now).await?;
        }
        Ok(now)
    }

    /// Sets someone's password for them: an admin on the Users page
    /// (`actor`), or the operator at the command line (`None`). Every
    /// session they had ends; their API tokens stay (a forgotten password
    /// is not a leaked token: disable them or revoke those for that). An
    /// admin changes their own password on the Account page, with the
    /// current one.
    pub async fn set_password(
        &self,
        actor: Option<&User>,
        target: UserId,
        new: &str,
        confirm: &str,
    ) -> Result<User> {
        if let Some(actor) = actor {
            if actor.role != Role::Admin {
                return Err(Error::Forbidden);
            }
            if actor.id == target {
                return Err(Error::Conflict {
                    code: "USE_ACCOUNT_PAGE",
                    message: "change your own password on your Account page, with your current one"
                        .into(),
                });
            }
        }
        let user = self.user(target).await?;
        let new = Password::confirmed(new, confirm)
            .map_err(|e| Error::invalid("new_password", e.to_string()))?;
        let hash = hash_password(new.expose()).await?;
        self.store()
            .set_password_hash(target, &hash, chrono::Utc::now())
            .await?;
        tracing::info!(user = %user.id, by = ?actor.map(|a| a.id.to_string()), "password set; the user's sessions ended");
        Ok(user)
    }

    /// Creates an API token; the secret is returned here and never again.
    pub async fn create_api_token(&self, user: &User, name: &str) -> Result<(ApiToken, String)> {
        let name = name.trim();
        let name = if name.is_empty() { "API token" } else { name };
        if name.chars().count() > TOKEN_NAME_LEN_MAX {
            return Err(Error::invalid(
                "name",
                format!("at most {TOKEN_NAME_LEN_MAX} characters"),
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(Error::invalid(
                "name",
                "must not contain control characters",
            ));
        }
        let fresh = new_api_token();
        let token = self
            .store()
            .insert_api_token(&NewApiToken {
                id: ApiTokenId::new(),
                user_id: user.id,
                name: name.to_string(),
                token_hash: fresh.hash,
                prefix: fresh.prefix,
                created_at: Utc::now(),
            })
            .await?;
        Ok((token, fresh.secret))
    }

    pub async fn api_tokens(&self, user: &User) -> Result<Vec<ApiToken>> {
        Ok(self.store().list_api_tokens(user.id).await?)
    }

    /// Revokes one of the user's own tokens; another user's token is 404.
    pub async fn revoke_api_token(&self, user: &User, id: ApiTokenId) -> Result<()> {
        if self.store().revoke_api_token(user.id, id).await? {
            Ok(())
        } else {
            Err(Error::NotFound("token"))
        }
    }
}

impl Tollgate {
    /// Whether `token` is this node's set-up token. Hashes are compared, so
    /// the time taken says nothing about how much of it was right.
    fn setup_token_matches(&self, token: &str) -> bool {
        use sha2::{Digest, Sha256};
        Sha256::digest(token.trim().as_bytes()) == Sha256::digest(self.setup_token().as_bytes())
    }
}

fn setup_complete() -> Error {
    Error::Conflict {
        code: "SETUP_COMPLETE",
        message: "setup is complete: an admin already exists; sign in instead".into(),
    }
}
