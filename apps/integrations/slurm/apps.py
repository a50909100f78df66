from django.apps import AppConfig


class SlurmConfig(AppConfig):
    name = "apps.integrations.slurm"
    label = "slurm"
    verbose_name = "Slurm integration"
