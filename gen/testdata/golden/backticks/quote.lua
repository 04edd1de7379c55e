-- Quote returns `text` wrapped in backticks: ``like this``.
--
-- @script quote
-- @arg text string   the text to wrap in `
-- @return quoted string
local bt = "`"
return {bt .. ARGV[1] .. "``" .. bt}
-- the file ends with a backtick and no newline: `