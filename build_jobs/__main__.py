from build_jobs.cli import app

app()
