"""zllm_core: a serving engine for coding agents, and its pieces as a library for other servers.

The public surface (semver: see README) is what `__all__` names:

Tokenization, exact and incremental
    Tokenizer            encode/decode like tiktoken; .from_family, .from_tokenizer_json, .from_gguf
    TokenizerSession     encode(prompt, session_id) -> ids, re-tokenizing only what changed
Tool dialects (conversation values <-> the exact text a model reads and writes)
    ToolDialect, HermesDialect, GlmDialect, DsmlDialect, dialect_named, ChatTemplate,
    FunctionTool, ToolCall, Message, ParsedOutput, StreamParser
Token fences (what a model may sample next, as a packed bitmask row)
    FenceFactory, FenceVocab, TokenFence, ToolChoice, ResponseFormat,
    allocate_token_bitmask, apply_token_bitmask_
Prefix cache index
    PrefixIndex, Scope
Protocols (OpenAI Chat Completions and Responses, Anthropic Messages <-> one canonical request)
    CanonicalRequest, ChatRequest, ResponsesRequest, MessagesRequest,
    from_openai_chat, from_responses, from_anthropic, ChatStream, ResponsesStream, MessagesStream
Serving the protocols over your own generate
    protocol_router (a FastAPI APIRouter), PromptBuilder, ServerConfig, GenerationEvent, SamplingParams

The transformers adapter lives in its module, since transformers is not a dependency:
`from zllm_core.adapters.transformers import FenceLogitsProcessor`. Every other module is
internal. docs/ has a page and a runnable example per entry point.
"""
from zllm_core.adapters.asgi import protocol_router
from zllm_core.adapters.vllm_tokenizer import TokenizerSession
from zllm_core.cache.prefix_index import PrefixIndex
from zllm_core.cache.scope import Scope
from zllm_core.dialects import (ChatTemplate, DsmlDialect, FunctionTool, GlmDialect, HermesDialect, Message,
                                ParsedOutput, StreamParser, ToolCall, ToolDialect, dialect_named)
from zllm_core.engine.output_processor import GenerationEvent
from zllm_core.engine.sampling_params import SamplingParams
from zllm_core.fence.bitmask import allocate_token_bitmask, apply_token_bitmask_
from zllm_core.fence.factory import FenceFactory
from zllm_core.fence.grammar import FenceVocab
from zllm_core.fence.token_fence import TokenFence
from zllm_core.protocols.anthropic_messages import MessagesRequest, MessagesStream
from zllm_core.protocols.anthropic_messages import to_canonical as from_anthropic
from zllm_core.protocols.canonical import CanonicalRequest, ResponseFormat, ToolChoice
from zllm_core.protocols.openai_chat import ChatRequest, ChatStream
from zllm_core.protocols.openai_chat import to_canonical as from_openai_chat
from zllm_core.protocols.openai_responses import ResponsesRequest
from zllm_core.protocols.openai_responses import to_canonical as from_responses
from zllm_core.protocols.responses_stream import ResponsesStream
from zllm_core.server.prompt import PromptBuilder
from zllm_core.server.runtime import ServerConfig
from zllm_core.tokenizer import Tokenizer

__version__ = "0.1.0"

__all__ = [
    "CanonicalRequest", "ChatRequest", "ChatStream", "ChatTemplate", "DsmlDialect", "FenceFactory", "FenceVocab",
    "FunctionTool", "GenerationEvent", "GlmDialect", "HermesDialect", "Message", "MessagesRequest",
    "MessagesStream", "ParsedOutput", "PrefixIndex", "PromptBuilder", "ResponseFormat", "ResponsesRequest",
    "ResponsesStream", "SamplingParams", "Scope", "ServerConfig", "StreamParser", "TokenFence", "Tokenizer",
    "TokenizerSession", "ToolCall", "ToolChoice", "ToolDialect", "allocate_token_bitmask",
    "apply_token_bitmask_", "dialect_named", "from_anthropic", "from_openai_chat", "from_responses",
    "protocol_router",
]
