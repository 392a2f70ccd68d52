// Byte-level BPE tokenizer built from a GGUF's tokenizer metadata (GPT-2 vocabularies, SmolLM2's "smollm"
// pre-tokenizer: single digits, then the GPT-2 regex), with the ChatML template of SmolLM2-Instruct.
// Equal to Hugging Face `tokenizers` on test/data/tokenizer_reference.json (test/test_tokenizer.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "blockpilot_workbench/io/gguf.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot {

namespace bpe_detail {

struct code_point_range {
  char32_t first;
  char32_t last;
};

// Non-ASCII code points of the Unicode general categories L* and N* (Unicode 14.0, generated with
// Python's unicodedata); ASCII is classified in code.
inline constexpr std::array<code_point_range, 646> letter_ranges = {{
    {0xAA, 0xAA}, {0xB5, 0xB5}, {0xBA, 0xBA}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x2C1}, {0x2C6, 0x2D1},
    {0x2E0, 0x2E4}, {0x2EC, 0x2EC}, {0x2EE, 0x2EE}, {0x370, 0x374}, {0x376, 0x377}, {0x37A, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F},
    {0x531, 0x556}, {0x559, 0x559}, {0x560, 0x588}, {0x5D0, 0x5EA}, {0x5EF, 0x5F2}, {0x620, 0x64A}, {0x66E, 0x66F},
    {0x671, 0x6D3}, {0x6D5, 0x6D5}, {0x6E5, 0x6E6}, {0x6EE, 0x6EF}, {0x6FA, 0x6FC}, {0x6FF, 0x6FF}, {0x710, 0x710},
    {0x712, 0x72F}, {0x74D, 0x7A5}, {0x7B1, 0x7B1}, {0x7CA, 0x7EA}, {0x7F4, 0x7F5}, {0x7FA, 0x7FA}, {0x800, 0x815},
    {0x81A, 0x81A}, {0x824, 0x824}, {0x828, 0x828}, {0x840, 0x858}, {0x860, 0x86A}, {0x870, 0x887}, {0x889, 0x88E},
    {0x8A0, 0x8C9}, {0x904, 0x939}, {0x93D, 0x93D}, {0x950, 0x950}, {0x958, 0x961}, {0x971, 0x980}, {0x985, 0x98C},
    {0x98F, 0x990}, {0x993, 0x9A8}, {0x9AA, 0x9B0}, {0x9B2, 0x9B2}, {0x9B6, 0x9B9}, {0x9BD, 0x9BD}, {0x9CE, 0x9CE},
    {0x9DC, 0x9DD}, {0x9DF, 0x9E1}, {0x9F0, 0x9F1}, {0x9FC, 0x9FC}, {0xA05, 0xA0A}, {0xA0F, 0xA10}, {0xA13, 0xA28},
    {0xA2A, 0xA30}, {0xA32, 0xA33}, {0xA35, 0xA36}, {0xA38, 0xA39}, {0xA59, 0xA5C}, {0xA5E, 0xA5E}, {0xA72, 0xA74},
    {0xA85, 0xA8D}, {0xA8F, 0xA91}, {0xA93, 0xAA8}, {0xAAA, 0xAB0}, {0xAB2, 0xAB3}, {0xAB5, 0xAB9}, {0xABD, 0xABD},
    {0xAD0, 0xAD0}, {0xAE0, 0xAE1}, {0xAF9, 0xAF9}, {0xB05, 0xB0C}, {0xB0F, 0xB10}, {0xB13, 0xB28}, {0xB2A, 0xB30},
    {0xB32, 0xB33}, {0xB35, 0xB39}, {0xB3D, 0xB3D}, {0xB5C, 0xB5D}, {0xB5F, 0xB61}, {0xB71, 0xB71}, {0xB83, 0xB83},
    {0xB85, 0xB8A}, {0xB8E, 0xB90}, {0xB92, 0xB95}, {0xB99, 0xB9A}, {0xB9C, 0xB9C}, {0xB9E, 0xB9F}, {0xBA3, 0xBA4},
    {0xBA8, 0xBAA}, {0xBAE, 0xBB9}, {0xBD0, 0xBD0}, {0xC05, 0xC0C}, {0xC0E, 0xC10}, {0xC12, 0xC28}, {0xC2A, 0xC39},
    {0xC3D, 0xC3D}, {0xC58, 0xC5A}, {0xC5D, 0xC5D}, {0xC60, 0xC61}, {0xC80, 0xC80}, {0xC85, 0xC8C}, {0xC8E, 0xC90},
    {0xC92, 0xCA8}, {0xCAA, 0xCB3}, {0xCB5, 0xCB9}, {0xCBD, 0xCBD}, {0xCDD, 0xCDE}, {0xCE0, 0xCE1}, {0xCF1, 0xCF2},
    {0xD04, 0xD0C}, {0xD0E, 0xD10}, {0xD12, 0xD3A}, {0xD3D, 0xD3D}, {0xD4E, 0xD4E}, {0xD54, 0xD56}, {0xD5F, 0xD61},
    {0xD7A, 0xD7F}, {0xD85, 0xD96}, {0xD9A, 0xDB1}, {0xDB3, 0xDBB}, {0xDBD, 0xDBD}, {0xDC0, 0xDC6}, {0xE01, 0xE30},
    {0xE32, 0xE33}, {0xE40, 0xE46}, {0xE81, 0xE82}, {0xE84, 0xE84}, {0xE86, 0xE8A}, {0xE8C, 0xEA3}, {0xEA5, 0xEA5},
    {0xEA7, 0xEB0}, {0xEB2, 0xEB3}, {0xEBD, 0xEBD}, {0xEC0, 0xEC4}, {0xEC6, 0xEC6}, {0xEDC, 0xEDF}, {0xF00, 0xF00},
    {0xF40, 0xF47}, {0xF49, 0xF6C}, {0xF88, 0xF8C}, {0x1000, 0x102A}, {0x103F, 0x103F}, {0x1050, 0x1055},
    {0x105A, 0x105D}, {0x1061, 0x1061}, {0x1065, 0x1066}, {0x106E, 0x1070}, {0x1075, 0x1081}, {0x108E, 0x108E},
    {0x10A0, 0x10C5}, {0x10C7, 0x10C7}, {0x10CD, 0x10CD}, {0x10D0, 0x10FA}, {0x10FC, 0x1248}, {0x124A, 0x124D},
    {0x1250, 0x1256}, {0x1258, 0x1258}, {0x125A, 0x125D}, {0x1260, 0x1288}, {0x128A, 0x128D}, {0x1290, 0x12B0},
    {0x12B2, 0x12B5}, {0x12B8, 0x12BE}, {0x12C0, 0x12C0}, {0x12C2, 0x12C5}, {0x12C8, 0x12D6}, {0x12D8, 0x1310},
    {0x1312, 0x1315}, {0x1318, 0x135A}, {0x1380, 0x138F}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1401, 0x166C},
    {0x166F, 0x167F}, {0x1681, 0x169A}, {0x16A0, 0x16EA}, {0x16F1, 0x16F8}, {0x1700, 0x1711}, {0x171F, 0x1731},
    {0x1740, 0x1751}, {0x1760, 0x176C}, {0x176E, 0x1770}, {0x1780, 0x17B3}, {0x17D7, 0x17D7}, {0x17DC, 0x17DC},
    {0x1820, 0x1878}, {0x1880, 0x1884}, {0x1887, 0x18A8}, {0x18AA, 0x18AA}, {0x18B0, 0x18F5}, {0x1900, 0x191E},
    {0x1950, 0x196D}, {0x1970, 0x1974}, {0x1980, 0x19AB}, {0x19B0, 0x19C9}, {0x1A00, 0x1A16}, {0x1A20, 0x1A54},
    {0x1AA7, 0x1AA7}, {0x1B05, 0x1B33}, {0x1B45, 0x1B4C}, {0x1B83, 0x1BA0}, {0x1BAE, 0x1BAF}, {0x1BBA, 0x1BE5},
    {0x1C00, 0x1C23}, {0x1C4D, 0x1C4F}, {0x1C5A, 0x1C7D}, {0x1C80, 0x1C88}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1CE9, 0x1CEC}, {0x1CEE, 0x1CF3}, {0x1CF5, 0x1CF6}, {0x1CFA, 0x1CFA}, {0x1D00, 0x1DBF}, {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4},
    {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC},
    {0x2071, 0x2071}, {0x207F, 0x207F}, {0x2090, 0x209C}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D},
    {0x212F, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2CE4},
    {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0x2D00, 0x2D25}, {0x2D27, 0x2D27}, {0x2D2D, 0x2D2D}, {0x2D30, 0x2D67},
    {0x2D6F, 0x2D6F}, {0x2D80, 0x2D96}, {0x2DA0, 0x2DA6}, {0x2DA8, 0x2DAE}, {0x2DB0, 0x2DB6}, {0x2DB8, 0x2DBE},
    {0x2DC0, 0x2DC6}, {0x2DC8, 0x2DCE}, {0x2DD0, 0x2DD6}, {0x2DD8, 0x2DDE}, {0x2E2F, 0x2E2F}, {0x3005, 0x3006},
    {0x3031, 0x3035}, {0x303B, 0x303C}, {0x3041, 0x3096}, {0x309D, 0x309F}, {0x30A1, 0x30FA}, {0x30FC, 0x30FF},
    {0x3105, 0x312F}, {0x3131, 0x318E}, {0x31A0, 0x31BF}, {0x31F0, 0x31FF}, {0x3400, 0x4DBF}, {0x4E00, 0xA48C},
    {0xA4D0, 0xA4FD}, {0xA500, 0xA60C}, {0xA610, 0xA61F}, {0xA62A, 0xA62B}, {0xA640, 0xA66E}, {0xA67F, 0xA69D},
    {0xA6A0, 0xA6E5}, {0xA717, 0xA71F}, {0xA722, 0xA788}, {0xA78B, 0xA7CA}, {0xA7D0, 0xA7D1}, {0xA7D3, 0xA7D3},
    {0xA7D5, 0xA7D9}, {0xA7F2, 0xA801}, {0xA803, 0xA805}, {0xA807, 0xA80A}, {0xA80C, 0xA822}, {0xA840, 0xA873},
    {0xA882, 0xA8B3}, {0xA8F2, 0xA8F7}, {0xA8FB, 0xA8FB}, {0xA8FD, 0xA8FE}, {0xA90A, 0xA925}, {0xA930, 0xA946},
    {0xA960, 0xA97C}, {0xA984, 0xA9B2}, {0xA9CF, 0xA9CF}, {0xA9E0, 0xA9E4}, {0xA9E6, 0xA9EF}, {0xA9FA, 0xA9FE},
    {0xAA00, 0xAA28}, {0xAA40, 0xAA42}, {0xAA44, 0xAA4B}, {0xAA60, 0xAA76}, {0xAA7A, 0xAA7A}, {0xAA7E, 0xAAAF},
    {0xAAB1, 0xAAB1}, {0xAAB5, 0xAAB6}, {0xAAB9, 0xAABD}, {0xAAC0, 0xAAC0}, {0xAAC2, 0xAAC2}, {0xAADB, 0xAADD},
    {0xAAE0, 0xAAEA}, {0xAAF2, 0xAAF4}, {0xAB01, 0xAB06}, {0xAB09, 0xAB0E}, {0xAB11, 0xAB16}, {0xAB20, 0xAB26},
    {0xAB28, 0xAB2E}, {0xAB30, 0xAB5A}, {0xAB5C, 0xAB69}, {0xAB70, 0xABE2}, {0xAC00, 0xD7A3}, {0xD7B0, 0xD7C6},
    {0xD7CB, 0xD7FB}, {0xF900, 0xFA6D}, {0xFA70, 0xFAD9}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFB1D, 0xFB1D},
    {0xFB1F, 0xFB28}, {0xFB2A, 0xFB36}, {0xFB38, 0xFB3C}, {0xFB3E, 0xFB3E}, {0xFB40, 0xFB41}, {0xFB43, 0xFB44},
    {0xFB46, 0xFBB1}, {0xFBD3, 0xFD3D}, {0xFD50, 0xFD8F}, {0xFD92, 0xFDC7}, {0xFDF0, 0xFDFB}, {0xFE70, 0xFE74},
    {0xFE76, 0xFEFC}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0xFF66, 0xFFBE}, {0xFFC2, 0xFFC7}, {0xFFCA, 0xFFCF},
    {0xFFD2, 0xFFD7}, {0xFFDA, 0xFFDC}, {0x10000, 0x1000B}, {0x1000D, 0x10026}, {0x10028, 0x1003A},
    {0x1003C, 0x1003D}, {0x1003F, 0x1004D}, {0x10050, 0x1005D}, {0x10080, 0x100FA}, {0x10280, 0x1029C},
    {0x102A0, 0x102D0}, {0x10300, 0x1031F}, {0x1032D, 0x10340}, {0x10342, 0x10349}, {0x10350, 0x10375},
    {0x10380, 0x1039D}, {0x103A0, 0x103C3}, {0x103C8, 0x103CF}, {0x10400, 0x1049D}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10500, 0x10527}, {0x10530, 0x10563}, {0x10570, 0x1057A}, {0x1057C, 0x1058A},
    {0x1058C, 0x10592}, {0x10594, 0x10595}, {0x10597, 0x105A1}, {0x105A3, 0x105B1}, {0x105B3, 0x105B9},
    {0x105BB, 0x105BC}, {0x10600, 0x10736}, {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10780, 0x10785},
    {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10800, 0x10805}, {0x10808, 0x10808}, {0x1080A, 0x10835},
    {0x10837, 0x10838}, {0x1083C, 0x1083C}, {0x1083F, 0x10855}, {0x10860, 0x10876}, {0x10880, 0x1089E},
    {0x108E0, 0x108F2}, {0x108F4, 0x108F5}, {0x10900, 0x10915}, {0x10920, 0x10939}, {0x10980, 0x109B7},
    {0x109BE, 0x109BF}, {0x10A00, 0x10A00}, {0x10A10, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35},
    {0x10A60, 0x10A7C}, {0x10A80, 0x10A9C}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4}, {0x10B00, 0x10B35},
    {0x10B40, 0x10B55}, {0x10B60, 0x10B72}, {0x10B80, 0x10B91}, {0x10C00, 0x10C48}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x10D00, 0x10D23}, {0x10E80, 0x10EA9}, {0x10EB0, 0x10EB1}, {0x10F00, 0x10F1C},
    {0x10F27, 0x10F27}, {0x10F30, 0x10F45}, {0x10F70, 0x10F81}, {0x10FB0, 0x10FC4}, {0x10FE0, 0x10FF6},
    {0x11003, 0x11037}, {0x11071, 0x11072}, {0x11075, 0x11075}, {0x11083, 0x110AF}, {0x110D0, 0x110E8},
    {0x11103, 0x11126}, {0x11144, 0x11144}, {0x11147, 0x11147}, {0x11150, 0x11172}, {0x11176, 0x11176},
    {0x11183, 0x111B2}, {0x111C1, 0x111C4}, {0x111DA, 0x111DA}, {0x111DC, 0x111DC}, {0x11200, 0x11211},
    {0x11213, 0x1122B}, {0x11280, 0x11286}, {0x11288, 0x11288}, {0x1128A, 0x1128D}, {0x1128F, 0x1129D},
    {0x1129F, 0x112A8}, {0x112B0, 0x112DE}, {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328},
    {0x1132A, 0x11330}, {0x11332, 0x11333}, {0x11335, 0x11339}, {0x1133D, 0x1133D}, {0x11350, 0x11350},
    {0x1135D, 0x11361}, {0x11400, 0x11434}, {0x11447, 0x1144A}, {0x1145F, 0x11461}, {0x11480, 0x114AF},
    {0x114C4, 0x114C5}, {0x114C7, 0x114C7}, {0x11580, 0x115AE}, {0x115D8, 0x115DB}, {0x11600, 0x1162F},
    {0x11644, 0x11644}, {0x11680, 0x116AA}, {0x116B8, 0x116B8}, {0x11700, 0x1171A}, {0x11740, 0x11746},
    {0x11800, 0x1182B}, {0x118A0, 0x118DF}, {0x118FF, 0x11906}, {0x11909, 0x11909}, {0x1190C, 0x11913},
    {0x11915, 0x11916}, {0x11918, 0x1192F}, {0x1193F, 0x1193F}, {0x11941, 0x11941}, {0x119A0, 0x119A7},
    {0x119AA, 0x119D0}, {0x119E1, 0x119E1}, {0x119E3, 0x119E3}, {0x11A00, 0x11A00}, {0x11A0B, 0x11A32},
    {0x11A3A, 0x11A3A}, {0x11A50, 0x11A50}, {0x11A5C, 0x11A89}, {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8},
    {0x11C00, 0x11C08}, {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40}, {0x11C72, 0x11C8F}, {0x11D00, 0x11D06},
    {0x11D08, 0x11D09}, {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D60, 0x11D65}, {0x11D67, 0x11D68},
    {0x11D6A, 0x11D89}, {0x11D98, 0x11D98}, {0x11EE0, 0x11EF2}, {0x11FB0, 0x11FB0}, {0x12000, 0x12399},
    {0x12480, 0x12543}, {0x12F90, 0x12FF0}, {0x13000, 0x1342E}, {0x14400, 0x14646}, {0x16800, 0x16A38},
    {0x16A40, 0x16A5E}, {0x16A70, 0x16ABE}, {0x16AD0, 0x16AED}, {0x16B00, 0x16B2F}, {0x16B40, 0x16B43},
    {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F}, {0x16E40, 0x16E7F}, {0x16F00, 0x16F4A}, {0x16F50, 0x16F50},
    {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1}, {0x16FE3, 0x16FE3}, {0x17000, 0x187F7}, {0x18800, 0x18CD5},
    {0x18D00, 0x18D08}, {0x1AFF0, 0x1AFF3}, {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122},
    {0x1B150, 0x1B152}, {0x1B164, 0x1B167}, {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C},
    {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99}, {0x1D400, 0x1D454}, {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F},
    {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB},
    {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C},
    {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546}, {0x1D54A, 0x1D550},
    {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714},
    {0x1D716, 0x1D734}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8},
    {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1DF00, 0x1DF1E}, {0x1E100, 0x1E12C}, {0x1E137, 0x1E13D},
    {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD}, {0x1E2C0, 0x1E2EB}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB},
    {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE}, {0x1E800, 0x1E8C4}, {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B},
    {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22}, {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27},
    {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39}, {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42},
    {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B}, {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52},
    {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59}, {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D},
    {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64}, {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72},
    {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E}, {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B},
    {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB}, {0x20000, 0x2A6DF}, {0x2A700, 0x2B738},
    {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1}, {0x2CEB0, 0x2EBE0}, {0x2F800, 0x2FA1D}, {0x30000, 0x3134A},
}};
inline constexpr std::array<code_point_range, 133> number_ranges = {{
    {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9}, {0x966, 0x96F},
    {0x9E6, 0x9EF}, {0x9F4, 0x9F9}, {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F}, {0xB72, 0xB77}, {0xBE6, 0xBF2},
    {0xC66, 0xC6F}, {0xC78, 0xC7E}, {0xCE6, 0xCEF}, {0xD58, 0xD5E}, {0xD66, 0xD78}, {0xDE6, 0xDEF}, {0xE50, 0xE59},
    {0xED0, 0xED9}, {0xF20, 0xF33}, {0x1040, 0x1049}, {0x1090, 0x1099}, {0x1369, 0x137C}, {0x16EE, 0x16F0},
    {0x17E0, 0x17E9}, {0x17F0, 0x17F9}, {0x1810, 0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19DA}, {0x1A80, 0x1A89},
    {0x1A90, 0x1A99}, {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49}, {0x1C50, 0x1C59}, {0x2070, 0x2070},
    {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189}, {0x2460, 0x249B}, {0x24EA, 0x24FF},
    {0x2776, 0x2793}, {0x2CFD, 0x2CFD}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303A}, {0x3192, 0x3195},
    {0x3220, 0x3229}, {0x3248, 0x324F}, {0x3251, 0x325F}, {0x3280, 0x3289}, {0x32B1, 0x32BF}, {0xA620, 0xA629},
    {0xA6E6, 0xA6EF}, {0xA830, 0xA835}, {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9}, {0xA9F0, 0xA9F9},
    {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x10107, 0x10133}, {0x10140, 0x10178}, {0x1018A, 0x1018B},
    {0x102E1, 0x102FB}, {0x10320, 0x10323}, {0x10341, 0x10341}, {0x1034A, 0x1034A}, {0x103D1, 0x103D5},
    {0x104A0, 0x104A9}, {0x10858, 0x1085F}, {0x10879, 0x1087F}, {0x108A7, 0x108AF}, {0x108FB, 0x108FF},
    {0x10916, 0x1091B}, {0x109BC, 0x109BD}, {0x109C0, 0x109CF}, {0x109D2, 0x109FF}, {0x10A40, 0x10A48},
    {0x10A7D, 0x10A7E}, {0x10A9D, 0x10A9F}, {0x10AEB, 0x10AEF}, {0x10B58, 0x10B5F}, {0x10B78, 0x10B7F},
    {0x10BA9, 0x10BAF}, {0x10CFA, 0x10CFF}, {0x10D30, 0x10D39}, {0x10E60, 0x10E7E}, {0x10F1D, 0x10F26},
    {0x10F51, 0x10F54}, {0x10FC5, 0x10FCB}, {0x11052, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F},
    {0x111D0, 0x111D9}, {0x111E1, 0x111F4}, {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9},
    {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x1173B}, {0x118E0, 0x118F2}, {0x11950, 0x11959},
    {0x11C50, 0x11C6C}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x11FC0, 0x11FD4}, {0x12400, 0x1246E},
    {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61}, {0x16E80, 0x16E96},
    {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9},
    {0x1E8C7, 0x1E8CF}, {0x1E950, 0x1E959}, {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4},
    {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D}, {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
}};

template <std::size_t N>
[[nodiscard]] constexpr bool in_ranges(const std::array<code_point_range, N>& ranges, char32_t c) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                                   [](char32_t x, const code_point_range& r) { return x < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

/// \p{L}: a letter.
[[nodiscard]] constexpr bool is_letter(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return in_ranges(letter_ranges, c);
}
/// \p{N}: a number (Nd, Nl, No); also Rust's `char::is_numeric`, which the Digits pre-tokenizer uses.
[[nodiscard]] constexpr bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(number_ranges, c);
}
/// \s of Oniguruma on UTF-8: the Unicode White_Space property.
[[nodiscard]] constexpr bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/// One decoded code point and its byte extent; an invalid UTF-8 byte becomes a one-byte code point
/// U+FFFD-like "other" character (neither letter, number nor space), so every byte is kept.
struct code_point {
  char32_t value;
  std::uint32_t begin;
  std::uint32_t end;
};

inline std::vector<code_point> decode_utf8(std::string_view s) {
  std::vector<code_point> out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    char32_t c = 0;
    if (b0 < 0x80) {
      len = 1, c = b0;
    } else if (b0 >= 0xc2 && b0 <= 0xdf) {
      len = 2, c = b0 & 0x1fu;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
      len = 3, c = b0 & 0x0fu;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      len = 4, c = b0 & 0x07u;
    }
    bool ok = len != 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0u) != 0x80u) ok = false;
      c = (c << 6) | (b & 0x3fu);
    }
    // Reject overlong forms, surrogates and values above U+10FFFF.
    if (ok && ((len == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) || (len == 4 && (c < 0x10000 || c > 0x10ffff))))
      ok = false;
    if (!ok) len = 1, c = 0xfffd;
    out.push_back({c, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + len)});
    i += len;
  }
  return out;
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

/// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the others to U+0100 onwards.
inline constexpr std::array<char32_t, 256> byte_to_unicode = [] {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}();

/// The matches of GPT-2's pattern
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// over `cps[first, last)` (the end of the range acts as the end of the text), as [begin, end) indices.
inline void gpt2_split(std::span<const code_point> cps, std::size_t first, std::size_t last,
                       std::vector<std::pair<std::size_t, std::size_t>>& out) {
  const auto cls = [&](std::size_t i) {  // 0 letter, 1 number, 2 space, 3 other
    const char32_t c = cps[i].value;
    return is_letter(c) ? 0 : is_number(c) ? 1 : is_space(c) ? 2 : 3;
  };
  std::size_t i = first;
  while (i < last) {
    const char32_t c = cps[i].value;
    // Contractions (case-sensitive, as in the pattern).
    if (c == '\'' && i + 1 < last) {
      const char32_t n = cps[i + 1].value;
      if (n == 's' || n == 't' || n == 'm' || n == 'd') {
        out.emplace_back(i, i + 2), i += 2;
        continue;
      }
      if (i + 2 < last) {
        const char32_t m = cps[i + 2].value;
        if ((n == 'r' && m == 'e') || (n == 'v' && m == 'e') || (n == 'l' && m == 'l')) {
          out.emplace_back(i, i + 3), i += 3;
          continue;
        }
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
    const std::size_t start = i;
    std::size_t body = i;
    if (c == ' ' && i + 1 < last && cls(i + 1) != 2) body = i + 1;
    const int k = cls(body);
    if (k != 2) {
      std::size_t j = body + 1;
      while (j < last && cls(j) == k) ++j;
      out.emplace_back(start, j), i = j;
      continue;
    }
    // Whitespace: `\s+(?!\S)` keeps the last space for the next word; `\s+` when that leaves nothing.
    std::size_t j = i + 1;
    while (j < last && cls(j) == 2) ++j;
    if (j < last && j - i >= 2) --j;
    out.emplace_back(start, j), i = j;
  }
}

/// Hash of a pair of token ids.
struct pair_hash {
  std::size_t operator()(std::uint64_t key) const noexcept { return std::hash<std::uint64_t>{}(key); }
};

}  // namespace bpe_detail

/// How text is split into words before BPE (GGUF `tokenizer.ggml.pre`).
enum class bpe_pre_tokenizer {
  gpt2,         ///< GPT-2's regex ("gpt2")
  digits_gpt2,  ///< each number character alone, then GPT-2's regex on the rest ("smollm", "starcoder", ...)
};

/// A byte-level BPE tokenizer (GGUF `tokenizer.ggml.model` "gpt2"): special tokens (token type 3) are
/// matched atomically in the text first (leftmost, then longest), the rest is pre-tokenized, mapped
/// through GPT-2's byte-to-unicode table and merged by rank. Thread-safe; `encode` caches words.
class bpe_tokenizer {
 public:
  /// The system turn SmolLM2-Instruct's chat template inserts when none is given.
  static constexpr std::string_view default_system_prompt =
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

  /// Builds the tokenizer from `tokenizer.ggml.{model, pre, tokens, merges, token_type, bos_token_id,
  /// eos_token_id, padding_token_id}`; throws `error` naming the file and the field when one is missing
  /// or inconsistent (a merge whose parts or result are not tokens, an unsupported pre-tokenizer, ...).
  [[nodiscard]] static bpe_tokenizer from_gguf(const io::gguf_file& file) {
    const std::string& source = file.source();
    const auto fail = [&](std::string_view field, const std::string& what) {
      return error("gguf file '" + source + "': metadata '" + std::string(field) + "': " + what);
    };
    const std::string& model = file.get_string("tokenizer.ggml.model");
    if (model != "gpt2")
      throw fail("tokenizer.ggml.model", "'" + model + "' is not a byte-level BPE vocabulary (expected 'gpt2')");

    bpe_tokenizer t;
    t.pre_name_ = file.contains("tokenizer.ggml.pre") ? file.get_string("tokenizer.ggml.pre") : "default";
    static constexpr std::array<std::string_view, 6> digit_splitters = {"smollm",   "starcoder", "refact",
                                                                        "codeshell", "command-r", "exaone"};
    if (std::ranges::find(digit_splitters, t.pre_name_) != digit_splitters.end())
      t.pre_ = bpe_pre_tokenizer::digits_gpt2;
    else if (t.pre_name_ == "gpt2" || t.pre_name_ == "default")
      t.pre_ = bpe_pre_tokenizer::gpt2;
    else
      throw fail("tokenizer.ggml.pre", "pre-tokenizer '" + t.pre_name_ + "' is not supported (supported: gpt2, " +
                                           "default, smollm, starcoder, refact, codeshell, command-r, exaone)");

    t.tokens_ = file.get_string_array("tokenizer.ggml.tokens");
    if (t.tokens_.empty() || t.tokens_.size() > static_cast<std::size_t>(std::numeric_limits<token_id>::max()))
      throw fail("tokenizer.ggml.tokens", "expected between 1 and 2^31-1 tokens, found " +
                                              std::to_string(t.tokens_.size()));
    const auto n = t.tokens_.size();
    t.special_.assign(n, false);
    if (file.contains("tokenizer.ggml.token_type")) {
      const auto types = file.get_int_array("tokenizer.ggml.token_type");
      if (types.size() != n)
        throw fail("tokenizer.ggml.token_type", std::to_string(types.size()) + " entries for " + std::to_string(n) +
                                                    " tokens");
      for (std::size_t i = 0; i < n; ++i) t.special_[i] = types[i] == 3;  // 3: control
    }
    t.ids_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (t.special_[i]) {
        if (t.tokens_[i].empty()) throw fail("tokenizer.ggml.tokens", "special token " + std::to_string(i) + " is empty");
        t.specials_.push_back(static_cast<token_id>(i));
      } else {
        t.ids_.emplace(t.tokens_[i], static_cast<token_id>(i));  // first one wins on duplicates
      }
    }

    for (unsigned b = 0; b < 256; ++b) {
      std::string s;
      bpe_detail::append_utf8(s, bpe_detail::byte_to_unicode[b]);
      const auto it = t.ids_.find(s);
      t.byte_ids_[b] = it == t.ids_.end() ? -1 : it->second;  // SmolLM2 lacks 21 bytes (never in UTF-8 text)
      t.unicode_to_byte_.emplace(bpe_detail::byte_to_unicode[b], static_cast<std::uint8_t>(b));
    }
    if (std::ranges::count(t.byte_ids_, -1) > 128)
      throw fail("tokenizer.ggml.tokens", "fewer than half of the 256 byte tokens: not a byte-level vocabulary");

    const auto merges = file.get_string_array("tokenizer.ggml.merges");
    t.merges_.reserve(merges.size());
    for (std::size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      const auto space = m.find(' ', 1);  // a part may not be empty; the first space after it splits
      const auto where = "merge " + std::to_string(r) + " '" + m + "'";
      if (space == std::string::npos || space + 1 >= m.size())
        throw fail("tokenizer.ggml.merges", where + " is not two tokens separated by a space");
      const auto a = t.ids_.find(std::string_view(m).substr(0, space));
      const auto b = t.ids_.find(std::string_view(m).substr(space + 1));
      const auto ab = t.ids_.find(m.substr(0, space) + m.substr(space + 1));
      if (a == t.ids_.end() || b == t.ids_.end() || ab == t.ids_.end())
        throw fail("tokenizer.ggml.merges", where + ": a part or the merged token is not in tokenizer.ggml.tokens");
      t.merges_.try_emplace(pair_key(a->second, b->second), merge{static_cast<std::uint32_t>(r), ab->second});
    }

    const auto id_field = [&](std::string_view key, std::int64_t fallback) {
      const std::int64_t id = file.get_int(key, fallback);
      if (id < -1 || id >= static_cast<std::int64_t>(n))
        throw fail(key, "token id " + std::to_string(id) + " is outside [0, " + std::to_string(n) + ")");
      return static_cast<token_id>(id);
    };
    t.bos_ = id_field("tokenizer.ggml.bos_token_id", -1);
    t.eos_ = id_field("tokenizer.ggml.eos_token_id", -1);
    t.pad_ = id_field("tokenizer.ggml.padding_token_id", -1);
    return t;
  }

  bpe_tokenizer(const bpe_tokenizer& o)
      : tokens_(o.tokens_), special_(o.special_), specials_(o.specials_), ids_(o.ids_), merges_(o.merges_),
        byte_ids_(o.byte_ids_), unicode_to_byte_(o.unicode_to_byte_), pre_(o.pre_), pre_name_(o.pre_name_),
        bos_(o.bos_), eos_(o.eos_), pad_(o.pad_) {}
  bpe_tokenizer(bpe_tokenizer&& o) noexcept
      : tokens_(std::move(o.tokens_)), special_(std::move(o.special_)), specials_(std::move(o.specials_)),
        ids_(std::move(o.ids_)), merges_(std::move(o.merges_)), byte_ids_(o.byte_ids_),
        unicode_to_byte_(std::move(o.unicode_to_byte_)), pre_(o.pre_), pre_name_(std::move(o.pre_name_)),
        bos_(o.bos_), eos_(o.eos_), pad_(o.pad_) {}
  bpe_tokenizer& operator=(bpe_tokenizer o) noexcept {
    swap(o);
    return *this;
  }
  ~bpe_tokenizer() = default;

  /// The token ids of `text`. Special tokens written in the text become their ids (no BOS is added);
  /// the rest is byte-level, so text round-trips through `decode`, except bytes that have no token in the
  /// vocabulary: they are dropped, as Hugging Face `tokenizers` does (SmolLM2 lacks the control bytes
  /// 0x04 0x06 0x13 0x14 0x16 0x1d and the bytes 0xc0 0xc1 0xf1 0xf2 0xf5-0xff, never or hardly ever in
  /// UTF-8 text; `dropped_bytes` lists them).
  [[nodiscard]] std::vector<token_id> encode(std::string_view text) const {
    std::vector<token_id> out;
    std::size_t done = 0;
    while (done < text.size()) {
      std::size_t at = text.size(), length = 0;
      token_id special = -1;
      for (std::size_t i = done; i < text.size() && length == 0; ++i) {  // leftmost, then longest
        for (const token_id s : specials_) {
          const std::string& t = tokens_[static_cast<std::size_t>(s)];
          if (t.size() > length && text.substr(i).starts_with(t)) at = i, length = t.size(), special = s;
        }
      }
      encode_ordinary(text.substr(done, at - done), out);
      if (special >= 0) out.push_back(special);
      done = at + length;
    }
    return out;
  }

  /// The bytes of `ids`: special tokens as their text, the others through the unicode-to-byte map.
  /// The result is not checked to be UTF-8 (a prefix of a sequence may end inside a character).
  /// Throws nothing; an id outside [0, vocab_size()) contributes nothing.
  [[nodiscard]] std::string decode(std::span<const token_id> ids) const {
    std::string out;
    for (const token_id id : ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) continue;
      const std::string& t = tokens_[static_cast<std::size_t>(id)];
      if (special_[static_cast<std::size_t>(id)]) {
        out += t;
        continue;
      }
      for (const auto& cp : bpe_detail::decode_utf8(t)) {
        const auto it = unicode_to_byte_.find(cp.value);
        if (it != unicode_to_byte_.end())
          out += static_cast<char>(it->second);
        else
          out.append(t, cp.begin, cp.end - cp.begin);
      }
    }
    return out;
  }

  /// SmolLM2-Instruct's chat template (ChatML) for one user turn, with the generation prompt:
  /// `<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n`,
  /// where `system` defaults to `default_system_prompt`.
  [[nodiscard]] static std::string apply_chat_template(std::string_view user_message,
                                                       std::string_view system = default_system_prompt) {
    std::string s;
    s.reserve(user_message.size() + system.size() + 96);
    s.append("<|im_start|>system\n").append(system).append("<|im_end|>\n");
    s.append("<|im_start|>user\n").append(user_message).append("<|im_end|>\n");
    s.append("<|im_start|>assistant\n");
    return s;
  }
  /// `encode(apply_chat_template(user_message, system))`.
  [[nodiscard]] std::vector<token_id> encode_chat(std::string_view user_message,
                                                  std::string_view system = default_system_prompt) const {
    return encode(apply_chat_template(user_message, system));
  }

  /// Number of tokens (rows of the embedding).
  [[nodiscard]] std::size_t vocab_size() const { return tokens_.size(); }
  /// `tokenizer.ggml.bos_token_id`, or -1 when absent.
  [[nodiscard]] token_id bos_id() const { return bos_; }
  /// `tokenizer.ggml.eos_token_id`, or -1 when absent.
  [[nodiscard]] token_id eos_id() const { return eos_; }
  /// `tokenizer.ggml.padding_token_id`, or -1 when absent.
  [[nodiscard]] token_id pad_id() const { return pad_; }
  /// The vocabulary entry of `id` (byte-level form, e.g. "Ġthe"); `id` must be in [0, vocab_size()).
  [[nodiscard]] const std::string& token_text(token_id id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  /// Whether `id` is a special (control, type 3) token.
  [[nodiscard]] bool is_special(token_id id) const {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() && special_[static_cast<std::size_t>(id)];
  }
  /// The id of the special token spelled `text`, if there is one.
  [[nodiscard]] std::optional<token_id> special_id(std::string_view text) const {
    for (const token_id s : specials_)
      if (tokens_[static_cast<std::size_t>(s)] == text) return s;
    return std::nullopt;
  }
  /// The pre-tokenizer in use, and the GGUF name it was chosen from.
  [[nodiscard]] bpe_pre_tokenizer pre_tokenizer() const { return pre_; }
  [[nodiscard]] const std::string& pre_tokenizer_name() const { return pre_name_; }
  /// The bytes that have no token of their own (dropped by `encode`).
  [[nodiscard]] std::vector<std::uint8_t> dropped_bytes() const {
    std::vector<std::uint8_t> out;
    for (unsigned b = 0; b < 256; ++b)
      if (byte_ids_[b] < 0) out.push_back(static_cast<std::uint8_t>(b));
    return out;
  }
  /// Number of merges (ranks 0..merge_count()-1).
  [[nodiscard]] std::size_t merge_count() const { return merges_.size(); }

  /// The words `text` is split into before BPE (pre-tokenization only; no special-token matching).
  [[nodiscard]] std::vector<std::string> pre_tokenize(std::string_view text) const {
    std::vector<std::string> words;
    for_each_word(text, [&](std::string_view w) { words.emplace_back(w); });
    return words;
  }

 private:
  struct merge {
    std::uint32_t rank;
    token_id result;
  };
  struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  static constexpr std::size_t cache_limit = 1u << 16;  ///< words cached before the cache is cleared

  bpe_tokenizer() = default;

  void swap(bpe_tokenizer& o) noexcept {
    using std::swap;
    swap(tokens_, o.tokens_), swap(special_, o.special_), swap(specials_, o.specials_), swap(ids_, o.ids_);
    swap(merges_, o.merges_), swap(byte_ids_, o.byte_ids_), swap(unicode_to_byte_, o.unicode_to_byte_);
    swap(pre_, o.pre_), swap(pre_name_, o.pre_name_), swap(bos_, o.bos_), swap(eos_, o.eos_), swap(pad_, o.pad_);
    std::scoped_lock lock(cache_mutex_, o.cache_mutex_);
    swap(cache_, o.cache_);
  }

  [[nodiscard]] static std::uint64_t pair_key(token_id a, token_id b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  /// Calls `f(word)` for every pre-tokenized word (a byte range of `text`).
  template <class F>
  void for_each_word(std::string_view text, F&& f) const {
    const auto cps = bpe_detail::decode_utf8(text);
    std::vector<std::pair<std::size_t, std::size_t>> words;
    if (pre_ == bpe_pre_tokenizer::digits_gpt2) {
      std::size_t start = 0;
      for (std::size_t i = 0; i < cps.size(); ++i) {
        if (!bpe_detail::is_number(cps[i].value)) continue;
        bpe_detail::gpt2_split(cps, start, i, words);
        words.emplace_back(i, i + 1);
        start = i + 1;
      }
      bpe_detail::gpt2_split(cps, start, cps.size(), words);
    } else {
      bpe_detail::gpt2_split(cps, 0, cps.size(), words);
    }
    for (const auto& [b, e] : words) f(text.substr(cps[b].begin, cps[e - 1].end - cps[b].begin));
  }

  /// Appends the ids of `text`, which holds no special token.
  void encode_ordinary(std::string_view text, std::vector<token_id>& out) const {
    if (text.empty()) return;
    for_each_word(text, [&](std::string_view word) {
      {
        std::lock_guard lock(cache_mutex_);
        if (const auto it = cache_.find(word); it != cache_.end()) {
          out.insert(out.end(), it->second.begin(), it->second.end());
          return;
        }
      }
      std::vector<token_id> ids = bpe(word);
      out.insert(out.end(), ids.begin(), ids.end());
      std::lock_guard lock(cache_mutex_);
      if (cache_.size() >= cache_limit) cache_.clear();
      cache_.emplace(std::string(word), std::move(ids));
    });
  }

  /// BPE on the bytes of one word: repeatedly merges the leftmost pair of lowest rank. A heap of
  /// candidate merges over a linked list of symbols keeps long words (runs of spaces) O(n log n).
  [[nodiscard]] std::vector<token_id> bpe(std::string_view word) const {
    struct symbol {
      token_id id;
      std::int32_t prev, next;  // -1 at the ends
      bool alive;
    };
    std::vector<symbol> symbols;
    symbols.reserve(word.size());
    for (const char c : word)  // a byte without a token is dropped, as `tokenizers` does without an unk token
      if (const token_id id = byte_ids_[static_cast<unsigned char>(c)]; id >= 0) {
        const auto n = static_cast<std::int32_t>(symbols.size());
        symbols.push_back({id, n - 1, n + 1, true});
      }
    if (symbols.empty()) return {};
    symbols.back().next = -1;

    struct candidate {
      std::uint32_t rank;
      std::int32_t pos;  // left symbol
      token_id result;
      bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<candidate> heap;
    const auto push = [&](std::int32_t left) {
      if (left < 0) return;
      const std::int32_t right = symbols[static_cast<std::size_t>(left)].next;
      if (right < 0) return;
      const auto it = merges_.find(pair_key(symbols[static_cast<std::size_t>(left)].id,
                                            symbols[static_cast<std::size_t>(right)].id));
      if (it == merges_.end()) return;
      heap.push_back({it->second.rank, left, it->second.result});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    };
    for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(symbols.size()); ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const candidate top = heap.back();
      heap.pop_back();
      symbol& left = symbols[static_cast<std::size_t>(top.pos)];
      if (!left.alive || left.next < 0) continue;
      symbol& right = symbols[static_cast<std::size_t>(left.next)];
      // Skip stale candidates: the pair at `pos` changed since this one was pushed.
      const auto it = merges_.find(pair_key(left.id, right.id));
      if (it == merges_.end() || it->second.result != top.result) continue;
      left.id = top.result;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
      push(left.prev);
      push(top.pos);
    }
    std::vector<token_id> out;
    for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next)
      out.push_back(symbols[static_cast<std::size_t>(i)].id);
    return out;
  }

  std::vector<std::string> tokens_;
  std::vector<bool> special_;
  std::vector<token_id> specials_;
  std::unordered_map<std::string, token_id, string_hash, std::equal_to<>> ids_;
  std::unordered_map<std::uint64_t, merge, bpe_detail::pair_hash> merges_;
  std::array<token_id, 256> byte_ids_{};
  std::unordered_map<char32_t, std::uint8_t> unicode_to_byte_;
  bpe_pre_tokenizer pre_ = bpe_pre_tokenizer::gpt2;
  std::string pre_name_;
  token_id bos_ = -1, eos_ = -1, pad_ = -1;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<token_id>, string_hash, std::equal_to<>> cache_;
};

}  // namespace blockpilot
