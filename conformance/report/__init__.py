"""The report room: everything a run writes into its report folder.

report.json and the folder itself (`document`), the HTML page (`html`, its CSS and drawing script
in `html_assets/`) and the page maps it draws (`pagemap`). It is written from verdicts; nothing
here runs a case.
"""
