"""The console's site: the sidebar and the home's app list grouped by task (Movements,
Approvals & policy, Venues, Integrations, Security) instead of by Django app, each model once.
Models no task names keep their app's group, after the tasks. Django shows a person only the
models they hold a permission for; grouping changes where they appear, not what is shown."""

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig

# (task, the "app_label.model" names in it, in sidebar order)
TASKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Movements",
        (
            "movements.movementrequest",
            "reservations.reservation",
            "movements.routetemplate",
        ),
    ),
    (
        "Approvals & policy",
        (
            "movements.overrideproposal",
            "movements.approvalpolicy",
            "movements.addressbookentry",
            "reservations.hardcap",
            "reservations.clientlimit",
        ),
    ),
    (
        "Venues",
        (
            "venues.chaintransaction",
            "venues.chainledgerentry",
            "venues.noncecursor",
            "venues.cexwithdrawal",
            "venues.cexclock",
        ),
    ),
    (
        "Integrations",
        (
            "callbacks.subscription",
            "callbacks.delivery",
            "access.apitoken",
            "authtoken.tokenproxy",
        ),
    ),
    (
        "Security",
        (
            "auth.user",
            "auth.group",
            "access.apitokenevent",
            "otp_totp.totpdevice",
            "axes.accessattempt",
            "axes.accessfailurelog",
            "axes.accesslog",
        ),
    ),
    (
        "Notifications",
        (
            "notifications.notificationpreference",
            "notifications.notification",
        ),
    ),
    (
        "Sandbox venues (demo and tests)",
        (
            "sandbox.withdrawal",
            "sandbox.deposit",
            "sandbox.chaintx",
            "sandbox.attestation",
            "sandbox.ledgerentry",
        ),
    ),
)


def group_by_task(app_list: list[dict]) -> list[dict]:
    """Django's app list (apps holding models) regrouped by task."""
    models = {
        f"{app['app_label']}.{model['object_name'].lower()}": (app, model)
        for app in app_list
        for model in app["models"]
    }
    grouped, placed = [], set()
    for task, names in TASKS:
        entries = [models[name][1] for name in names if name in models]
        if not entries:
            continue
        placed.update(name for name in names if name in models)
        slug = "task-" + "".join(c if c.isalnum() else "-" for c in task.lower())
        grouped.append(
            {
                "name": task,
                "app_label": slug,
                # The group's heading leads to its first page (a task has no index of its own).
                "app_url": entries[0].get("admin_url") or "",
                "has_module_perms": True,
                "models": entries,
            }
        )
    for app in app_list:
        rest = [
            m
            for m in app["models"]
            if f"{app['app_label']}.{m['object_name'].lower()}" not in placed
        ]
        if rest:
            grouped.append({**app, "models": rest})
    return grouped


class QTGAdminSite(admin.AdminSite):
    site_header = site_title = "QTG operations"
    index_title = "Operations"
    # The console is the site: "View site" leads to its home.
    site_url = "/admin/"

    def get_app_list(self, request, app_label=None):
        app_list = super().get_app_list(request, app_label)
        if app_label is not None:  # an app's own index page keeps its app
            return app_list
        return group_by_task(app_list)


class QTGAdminConfig(AdminConfig):
    default_site = "qtg.admin_site.QTGAdminSite"
