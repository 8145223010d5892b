//! `drover templates`: the job templates a caller may use, answered off the core from the
//! config in force: those open to every account or to one of the caller's accounts (sub-accounts
//! included); operators and admins see all of them.

use super::context::ClientContext;
use crate::model::identity::{Caller, user_name};
use crate::policy::authz::{Operation, Who};
use crate::policy::template::{describe, usable};
use drover_shared::proto::client::{Response, TemplateInfo};

pub(super) fn list(context: &ClientContext, caller: Caller) -> Response {
    let config = context.config.get();
    let all = Who::of(&config, caller).may(Operation::ReadAll);
    let user = user_name(caller.uid).unwrap_or_default();
    let accounts: Vec<String> = match config.users.iter().find(|u| u.name == user) {
        Some(u) => std::iter::once(u.default_account.clone()).chain(u.accounts.iter().cloned()).collect(),
        None => config.default_account.iter().cloned().collect(),
    };
    let templates = config
        .templates
        .iter()
        .filter(|t| all || accounts.iter().any(|a| usable(&config, t, a)))
        .map(|t| TemplateInfo {
            name: t.name.clone(),
            description: t.description.clone(),
            accounts: t.accounts.clone(),
            fields: describe(t),
            setup: t.setup.clone(),
        })
        .collect();
    Response::Templates { templates }
}
