"""Options of the opt-in real-endpoint test: ``pytest tests/synthesis/llm --synthesis.llm.base_url=URL
[--synthesis.llm.model=NAME] [--synthesis.llm.api_key=KEY]``."""


def pytest_addoption(parser):
    group = parser.getgroup("trace-rl LLM env synthesis")
    group.addoption("--synthesis.llm.base_url", dest="synthesis_llm_base_url", default=None,
                    help="an OpenAI-compatible endpoint for the opt-in real LLM env generation test")
    group.addoption("--synthesis.llm.model", dest="synthesis_llm_model", default="", help="its model name")
    group.addoption("--synthesis.llm.api_key", dest="synthesis_llm_api_key", default="EMPTY", help="its API key")
