from django import forms


class TensorBoardImportForm(forms.Form):
    experiment = forms.CharField(max_length=200, help_text="Runs of one name share an experiment (made on first use).")
    name = forms.CharField(max_length=200, required=False,
                           help_text="The run's label (default: the file's name); with several runs, each is "
                                     "this/its folder.")
    archive = forms.FileField(help_text="The log folder as a .zip or .tar.gz (its events.out.tfevents files).")
