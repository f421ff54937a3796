from streamfold.cli import app

app(prog_name="streamfold")
