from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "API access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin

        from access.second_factor import SecondFactorAuthenticationForm

        # The console's sign-in asks for the one-time code (django-otp's admin template).
        admin.site.login_form = SecondFactorAuthenticationForm
        admin.site.login_template = "otp/admin111/login.html"
