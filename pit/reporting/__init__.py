"""The paper's tables, figures and REPORT.md from run folders, our numbers beside the paper's.

- tables.py: Tables 1-4 (`pit table`), written as Markdown, CSV and LaTeX
- figures.py: Figures 2-4, interface drift, side effects (`pit figure`)
- report.py: results/REPORT.md (`pit report`)
- captions.py: which caption file (workflow/report/*.rst) goes with a figure
- paper.py + paper_values.yaml: the paper's reported numbers, cited to table and row
"""
