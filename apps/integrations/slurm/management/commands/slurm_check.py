"""`manage.py slurm_check`: what the portal can and cannot reach of the configured Slurm."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.fleet.models import GpuModel, Node
from apps.integrations.slurm import services
from apps.integrations.slurm.client import SlurmError
from apps.teams.models import Team

COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sacctmgr", "sinfo")


class Command(BaseCommand):
    help = "Check the Slurm integration's settings against the cluster and say what works."

    def handle(self, *args, **options):
        problems = 0

        def report(ok: bool, what: str, detail: str = "") -> None:
            nonlocal problems
            problems += 0 if ok else 1
            mark = self.style.SUCCESS("ok  ") if ok else self.style.ERROR("FAIL")
            self.stdout.write(f"{mark} {what}" + (f": {detail}" if detail else ""))

        self.stdout.write(
            f"JOB_BACKEND={settings.JOB_BACKEND} SLURM_ENABLED={settings.SLURM_ENABLED} "
            f"SLURM_CONF={settings.SLURM_CONF or '(Slurm default)'} "
            f"SLURM_BIN_DIR={settings.SLURM_BIN_DIR or '(PATH)'}"
        )
        slurm = services.client()
        for name in COMMANDS:
            try:
                slurm.run(name, "--version")
                report(True, f"{name} runs")
            except SlurmError as error:
                report(False, f"{name} runs", error.reason)
        try:
            report(True, "slurmctld answers", slurm.ping())
        except SlurmError as error:
            report(False, "slurmctld answers", error.reason)
        try:
            services._cluster_name.cache_clear()
            report(True, "cluster name", services.cluster_name())
        except SlurmError as error:
            report(False, "cluster name", error.reason)
        try:
            slurm_nodes = slurm.node_states()
            portal_nodes = set(Node.objects.values_list("hostname", flat=True))
            missing = sorted(portal_nodes - set(slurm_nodes))
            report(
                not missing,
                f"portal nodes known to Slurm ({len(portal_nodes) - len(missing)} of "
                f"{len(portal_nodes)})",
                f"unknown to Slurm: {', '.join(missing)}" if missing else "",
            )
            gres = slurm.run("sinfo", "-h", "-o", "%G")
            for model in GpuModel.objects.all():
                type_name = services.gpu_type(model)
                report(
                    f"gpu:{type_name}:" in gres,
                    f"GPU model {model.name} is gres type {type_name!r}",
                    "" if f"gpu:{type_name}:" in gres else "no node offers it (SLURM_GPU_TYPES)",
                )
            for name, state in sorted(services.nodes_out_of_service().items()):
                self.stdout.write(f"info node {name} is out of service in Slurm: {state}")
        except SlurmError as error:
            report(False, "sinfo", error.reason)
        try:
            teams = list(Team.objects.filter(is_active=True).order_by("slug"))
            drift = {team.slug: services.limits_drift(team) for team in teams}
            missing = [slug for slug, d in drift.items() if d and d["slurm"] is None]
            report(
                not missing,
                f"teams with a Slurm account ({len(teams) - len(missing)} of {len(teams)})",
                f"missing: {', '.join(missing)}" if missing else "",
            )
            for slug, d in drift.items():
                if d and d["slurm"] is not None:
                    report(
                        False,
                        f"limits of {slug} match its quota",
                        f"Slurm has GrpTRES={d['slurm']['grptres'] or '(none)'} "
                        f"Fairshare={d['slurm']['fairshare']}, the quota gives "
                        f"GrpTRES={d['portal']['grptres'] or '(none)'} "
                        f"Fairshare={d['portal']['fairshare']}",
                    )
            if any(drift.values()):
                self.stdout.write("     the slurm.sync task (every 10 minutes) corrects these")
        except SlurmError as error:
            report(False, "sacctmgr (slurmdbd)", error.reason)
        if problems:
            raise CommandError(f"{problems} check(s) failed.")
        self.stdout.write(self.style.SUCCESS("Slurm is reachable and matches the portal."))
