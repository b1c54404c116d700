"""Custom search attributes that let operators find activations in the UI and CLI.

Register them once per namespace (`wfi up` and the test fixtures do this):
``temporal operator search-attribute create --name WfiWorkflow --type Keyword`` and so on.
"""

from temporalio.common import SearchAttributeKey

WFI_WORKFLOW = SearchAttributeKey.for_keyword("WfiWorkflow")
WFI_ACTIVATION = SearchAttributeKey.for_keyword("WfiActivation")
WFI_STATE = SearchAttributeKey.for_keyword("WfiState")
WFI_TRIGGERS = SearchAttributeKey.for_keyword_list("WfiTriggers")

ALL = (WFI_WORKFLOW, WFI_ACTIVATION, WFI_STATE, WFI_TRIGGERS)
