"""Run the portal on a cluster's existing Slurm: jobs become sbatch jobs under the team's
account, bookings become advance reservations, quotas become GrpTRES limits."""
