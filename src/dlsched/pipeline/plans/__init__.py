"""Pipeline plans as data: actions, stages, the microbatch schedules, their checks, files and
exports."""
