from serval_cli.main import app

app()
